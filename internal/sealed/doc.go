// Package sealed encrypts a byte stream in authenticated records: the
// STREAM construction (Hoang, Reyhanitabar, Rogaway, Vizár, "Online
// Authenticated-Encryption and its Nonce-Reuse Misuse-Resistance", CRYPTO
// 2015) over AES-256-GCM. A stream is
//
//	magic "MSRTSEAL" | 7-byte random nonce prefix | records
//
// and a record is a 4-byte big-endian header (bit 31: last record; the
// rest: ciphertext length, at most RecordSize+16) and the GCM ciphertext of
// up to RecordSize plaintext bytes, sealed under the nonce prefix ‖ 4-byte
// record counter ‖ last flag. Reordered, dropped, altered or truncated
// records fail to open; the last record (possibly empty) ends the stream.
// The AES key is derived from the caller's key with HKDF-SHA256 and an
// info string, so the same key can serve other purposes.
package sealed
