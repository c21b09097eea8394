package datadir

import (
	"bufio"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	bg "github.com/dgraph-io/badger/v4"
)

// Backup file format, version 1 (all integers little-endian):
//
//	magic   [8]byte  "\x89MSRTBK\n"
//	format  uint16   1
//	hlen    uint32   length of the header, bytes (at most 64 KiB)
//	header  [hlen]byte JSON: backupHeader
//	frames  repeated: n uint32 (> 0, at most maxFrame), body [n]byte
//	end     n uint32 = 0, records uint64, payload uint64, sum [32]byte
//
// A frame body is a run of whole records; sealed with AES-256-GCM when the
// backup is encrypted (nonce: 4 zero bytes and the frame's index as a
// big-endian uint64, from 0; the key derived from the directory's key and
// the header's salt, see backupKey). A record is uvarint key length, key,
// uvarint value length, value, one byte of Badger user meta and uvarint
// expiry (Unix seconds, 0 for none). sum is the SHA-256 of every byte of
// the file before it, or, for an encrypted backup, their HMAC-SHA256 under
// the backup key, so a truncated, damaged or extended file is refused
// before anything is restored.
//
// The records are the live keys of one read transaction (the latest value
// of each; deleted and expired keys are not in it), so a backup is a
// consistent snapshot taken while writes go on: every commit that returned
// before Backup began is in it, none that began after it is. The
// transaction begins while no operation held by DB.HoldBackup is in
// progress, so an operation made of several commits (a cube delete) is in
// it whole or not at all. Badger's own
// DB.Backup streams from several transactions at once, one per goroutine,
// whose snapshots differ under writes; it is not used.

// backupMagic starts every backup file.
var backupMagic = [8]byte{0x89, 'M', 'S', 'R', 'T', 'B', 'K', '\n'}

const (
	// backupFormat is the file format version Backup writes and RestoreBackup reads.
	backupFormat = 1
	// frameTarget is the frame size Backup aims for, plaintext bytes.
	frameTarget = 1 << 20
	// maxFrame bounds a frame as stored, bytes: one record of the largest
	// value Badger takes (1 GiB, its ValueLogFileSize limit) and headroom.
	maxFrame = 1<<30 + 1<<20
	// maxHeader bounds the JSON header, bytes.
	maxHeader = 64 << 10
)

var (
	// ErrBackupDamaged is returned by RestoreBackup and VerifyBackup when the
	// file is not a whole backup: truncated, a byte changed, bytes added,
	// or not a memosrt backup at all. Nothing is restored.
	ErrBackupDamaged = errors.New("badger: backup file damaged or truncated")
	// ErrBackupFormat is returned by RestoreBackup and VerifyBackup for a backup
	// written in a format version this build does not read (a newer
	// memosrt made it).
	ErrBackupFormat = errors.New("badger: backup format not supported")
	// ErrBackupKey is returned by RestoreBackup and VerifyBackup when the file is
	// encrypted and no key, or not the key it was made with, was given.
	ErrBackupKey = errors.New("badger: wrong or missing key for this backup")
	// ErrNotEmpty is returned by RestoreBackup when the target exists and is not
	// an empty directory. Nothing is written.
	ErrNotEmpty = errors.New("badger: restore target exists and is not empty")
)

// BackupInfo describes a backup file.
type BackupInfo struct {
	// Format is the file format version.
	Format int `json:"format"`
	// Version is the memosrt version that wrote it (BackupOptions.Version).
	Version string `json:"memosrt_version"`
	// Created is when the snapshot was taken (UTC).
	Created time.Time `json:"created"`
	// Encrypted says the records are sealed under the data directory's key.
	Encrypted bool `json:"encrypted"`
	// Records is the number of keys, Bytes their keys and values together,
	// bytes (before encryption).
	Records int64 `json:"records"`
	Bytes   int64 `json:"bytes"`
}

// BackupOptions configure Backup.
type BackupOptions struct {
	// Version is the memosrt version recorded in the header.
	Version string
}

// backupHeader is the JSON header of a backup file.
type backupHeader struct {
	Version   string    `json:"memosrt_version"`
	Created   time.Time `json:"created"`
	Encrypted bool      `json:"encrypted,omitempty"`
	// Salt (hex, 16 bytes) makes the backup key unique to the file.
	Salt string `json:"salt,omitempty"`
	// KeyCheck (hex) is the HMAC-SHA256 of "key check" under the backup
	// key, first 16 bytes: a wrong key is named before any frame is read.
	KeyCheck string `json:"key_check,omitempty"`
}

// backupKey derives a file's AES-256 key from the directory's key and the
// file's salt: HMAC-SHA256(dirKey, "memosrt backup v1\x00" || salt).
func backupKey(dirKey, salt []byte) []byte {
	m := hmac.New(sha256.New, dirKey)
	m.Write([]byte("memosrt backup v1\x00"))
	m.Write(salt)
	return m.Sum(nil)
}

func keyCheck(k []byte) string {
	m := hmac.New(sha256.New, k)
	m.Write([]byte("key check"))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

func frameNonce(i uint64) []byte {
	n := make([]byte, 12)
	binary.BigEndian.PutUint64(n[4:], i)
	return n
}

// Backup writes a consistent snapshot of the database to w in the backup
// file format (see the comment at the top of backup.go) and returns what
// it wrote. Writes to the database go on meanwhile; every commit that
// returned before Backup was called is in the snapshot. The snapshot is
// taken once the operations held by HoldBackup when Backup is called have
// ended (their releases), so that each such operation is in it whole or
// not at all; those begun meanwhile wait for the snapshot. When the database
// was opened with an EncryptionKey, the file is encrypted under a key
// derived from it (RestoreBackup needs the same key); otherwise it is plaintext.
// ctx is checked while waiting for held operations and between frames
// (about 1 MiB each). Errors: ErrClosed,
// ctx's error, w's error, a Badger read error (wrapped); on an error the
// file has no valid end and RestoreBackup refuses it.
func (d *DB) Backup(ctx context.Context, w io.Writer, opts BackupOptions) (BackupInfo, error) {
	if d.db == nil || d.db.IsClosed() {
		return BackupInfo{}, ErrClosed
	}
	var txn *bg.Txn
	if err := d.holds.snapshot(ctx, func() { txn = d.db.NewTransaction(false) }); err != nil {
		return BackupInfo{}, fmt.Errorf("badger: backup: %w", err)
	}
	defer txn.Discard()
	h := backupHeader{Version: opts.Version, Created: time.Now().UTC().Round(0)}
	var aead cipher.AEAD
	var sum hash.Hash = sha256.New()
	if len(d.key) > 0 {
		salt := make([]byte, 16)
		if _, err := rand.Read(salt); err != nil {
			return BackupInfo{}, fmt.Errorf("badger: backup: %w", err)
		}
		k := backupKey(d.key, salt)
		block, err := aes.NewCipher(k)
		if err != nil {
			return BackupInfo{}, fmt.Errorf("badger: backup: %w", err)
		}
		if aead, err = cipher.NewGCM(block); err != nil {
			return BackupInfo{}, fmt.Errorf("badger: backup: %w", err)
		}
		h.Encrypted, h.Salt, h.KeyCheck = true, hex.EncodeToString(salt), keyCheck(k)
		sum = hmac.New(sha256.New, k)
	}
	info := BackupInfo{Format: backupFormat, Version: h.Version, Created: h.Created, Encrypted: h.Encrypted}
	hj, err := json.Marshal(h)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("badger: backup: %w", err)
	}
	bw := bufio.NewWriterSize(io.MultiWriter(w, sum), 256<<10)
	fail := func(err error) (BackupInfo, error) { return info, fmt.Errorf("badger: backup: %w", err) }
	var pre []byte
	pre = append(pre, backupMagic[:]...)
	pre = binary.LittleEndian.AppendUint16(pre, backupFormat)
	pre = binary.LittleEndian.AppendUint32(pre, uint32(len(hj)))
	pre = append(pre, hj...)
	if _, err := bw.Write(pre); err != nil {
		return fail(err)
	}

	var frame []byte
	var nframes uint64
	flush := func() error {
		if len(frame) == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		body := frame
		if aead != nil {
			body = aead.Seal(nil, frameNonce(nframes), frame, nil)
		}
		var n [4]byte
		binary.LittleEndian.PutUint32(n[:], uint32(len(body)))
		if _, err := bw.Write(n[:]); err != nil {
			return err
		}
		if _, err := bw.Write(body); err != nil {
			return err
		}
		nframes++
		frame = frame[:0]
		return nil
	}

	it := txn.NewIterator(bg.IteratorOptions{})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		k := item.Key()
		if string(k) == string(sentinelKey) {
			continue
		}
		frame = binary.AppendUvarint(frame, uint64(len(k)))
		frame = append(frame, k...)
		err := item.Value(func(v []byte) error {
			frame = binary.AppendUvarint(frame, uint64(len(v)))
			frame = append(frame, v...)
			info.Bytes += int64(len(k) + len(v))
			return nil
		})
		if err != nil {
			return fail(fmt.Errorf("read %q: %w", k, err))
		}
		frame = append(frame, item.UserMeta())
		frame = binary.AppendUvarint(frame, item.ExpiresAt())
		info.Records++
		if len(frame) >= frameTarget {
			if err := flush(); err != nil {
				return fail(err)
			}
		}
	}
	if err := flush(); err != nil {
		return fail(err)
	}
	var end []byte
	end = binary.LittleEndian.AppendUint32(end, 0)
	end = binary.LittleEndian.AppendUint64(end, uint64(info.Records))
	end = binary.LittleEndian.AppendUint64(end, uint64(info.Bytes))
	if _, err := bw.Write(end); err != nil {
		return fail(err)
	}
	if err := bw.Flush(); err != nil {
		return fail(err)
	}
	if _, err := w.Write(sum.Sum(nil)); err != nil {
		return fail(err)
	}
	return info, nil
}

// backupRecord is one key of a backup.
type backupRecord struct {
	key, value []byte
	userMeta   byte
	expiresAt  uint64
}

// hashReader feeds what it reads to a hash and counts it.
type hashReader struct {
	r   io.Reader
	h   hash.Hash
	off int64
}

func (h *hashReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.off += int64(n)
	return n, err
}

// readBackup reads a backup file from r, calling each (when not nil) for
// every record in order, and returns its description once the end and
// its sum are verified. key is the data directory key the backup may be
// encrypted under. A record handed to each is valid until each returns.
func readBackup(ctx context.Context, r io.Reader, key []byte, each func(backupRecord) error) (BackupInfo, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	hr := &hashReader{r: br, h: sha256.New()}
	damaged := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s (at byte %d)", ErrBackupDamaged, fmt.Sprintf(format, args...), hr.off)
	}
	short := func(what string, err error) error {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return damaged("the file ends inside %s", what)
		}
		return fmt.Errorf("badger: read backup: %w", err)
	}
	var pre [14]byte
	if _, err := io.ReadFull(hr, pre[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return BackupInfo{}, damaged("not a memosrt backup file: %d bytes", hr.off)
		}
		return BackupInfo{}, fmt.Errorf("badger: read backup: %w", err)
	}
	if [8]byte(pre[:8]) != backupMagic {
		return BackupInfo{}, damaged("not a memosrt backup file (no backup magic)")
	}
	if f := binary.LittleEndian.Uint16(pre[8:]); f != backupFormat {
		return BackupInfo{}, fmt.Errorf("%w: format %d, this memosrt reads %d", ErrBackupFormat, f, backupFormat)
	}
	hlen := binary.LittleEndian.Uint32(pre[10:])
	if hlen > maxHeader {
		return BackupInfo{}, damaged("header of %d bytes", hlen)
	}
	hj := make([]byte, hlen)
	if _, err := io.ReadFull(hr, hj); err != nil {
		return BackupInfo{}, short("the header", err)
	}
	var h backupHeader
	if err := json.Unmarshal(hj, &h); err != nil {
		return BackupInfo{}, damaged("header: %v", err)
	}
	info := BackupInfo{Format: backupFormat, Version: h.Version, Created: h.Created, Encrypted: h.Encrypted}
	var aead cipher.AEAD
	if h.Encrypted {
		salt, err := hex.DecodeString(h.Salt)
		if err != nil || len(salt) != 16 {
			return info, damaged("header: bad salt")
		}
		if len(key) == 0 {
			return info, fmt.Errorf("%w: it is encrypted and no key was given", ErrBackupKey)
		}
		k := backupKey(key, salt)
		if !hmac.Equal([]byte(keyCheck(k)), []byte(h.KeyCheck)) {
			return info, fmt.Errorf("%w: the %d-byte key given is not the one it was made with", ErrBackupKey, len(key))
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return info, fmt.Errorf("badger: read backup: %w", err)
		}
		if aead, err = cipher.NewGCM(block); err != nil {
			return info, fmt.Errorf("badger: read backup: %w", err)
		}
		// the sum so far is a plain SHA-256: start the HMAC over again
		m := hmac.New(sha256.New, k)
		m.Write(pre[:])
		m.Write(hj)
		hr.h = m
	}

	var buf []byte
	var records, payload int64
	for i := uint64(0); ; i++ {
		var nb [4]byte
		if _, err := io.ReadFull(hr, nb[:]); err != nil {
			return info, short("the frame list", err)
		}
		n := binary.LittleEndian.Uint32(nb[:])
		if n == 0 {
			break
		}
		if n > maxFrame {
			return info, damaged("frame %d of %d bytes", i, n)
		}
		if err := ctx.Err(); err != nil {
			return info, err
		}
		// grow as the bytes arrive, so a damaged length cannot make a
		// large allocation on its own
		if cap(buf) < int(n) {
			buf = make([]byte, 0, min(int(n), 4<<20))
		}
		b := growBuf{buf[:0]}
		if _, err := io.CopyN(&b, hr, int64(n)); err != nil {
			return info, short(fmt.Sprintf("frame %d", i), err)
		}
		buf = b.buf
		body := buf
		if aead != nil {
			var err error
			if body, err = aead.Open(buf[:0:0], frameNonce(i), buf, nil); err != nil {
				return info, damaged("frame %d does not authenticate", i)
			}
		}
		for len(body) > 0 {
			var rec backupRecord
			var ok bool
			if rec.key, body, ok = lenPrefixed(body); !ok {
				return info, damaged("frame %d: bad record %d", i, records)
			}
			if rec.value, body, ok = lenPrefixed(body); !ok || len(body) < 1 {
				return info, damaged("frame %d: bad record %d", i, records)
			}
			rec.userMeta, body = body[0], body[1:]
			exp, m := binary.Uvarint(body)
			if m <= 0 {
				return info, damaged("frame %d: bad record %d", i, records)
			}
			rec.expiresAt, body = exp, body[m:]
			records++
			payload += int64(len(rec.key) + len(rec.value))
			if each != nil {
				if err := each(rec); err != nil {
					return info, err
				}
			}
		}
	}
	var counts [16]byte
	if _, err := io.ReadFull(hr, counts[:]); err != nil {
		return info, short("the end", err)
	}
	want := hr.h.Sum(nil)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(br, got); err != nil {
		return info, short("the checksum", err)
	}
	if !hmac.Equal(got, want) {
		return info, damaged("checksum mismatch")
	}
	if n, _ := br.Read(make([]byte, 1)); n > 0 {
		return info, damaged("bytes after the end")
	}
	if r, p := int64(binary.LittleEndian.Uint64(counts[:])), int64(binary.LittleEndian.Uint64(counts[8:])); r != records || p != payload {
		return info, damaged("end says %d records of %d bytes, frames hold %d of %d", r, p, records, payload)
	}
	info.Records, info.Bytes = records, payload
	return info, nil
}

// growBuf is a byte sink for io.CopyN that grows as bytes arrive.
type growBuf struct{ buf []byte }

func (b *growBuf) Write(p []byte) (int, error) { b.buf = append(b.buf, p...); return len(p), nil }

// lenPrefixed splits a uvarint-length-prefixed field off b.
func lenPrefixed(b []byte) (field, rest []byte, ok bool) {
	n, m := binary.Uvarint(b)
	if m <= 0 || n > uint64(len(b)-m) {
		return nil, nil, false
	}
	return b[m : m+int(n)], b[m+int(n):], true
}

// VerifyBackup reads the backup file at path through to its end and
// checks its checksum, without restoring anything, and returns what it
// holds. key is the data directory key an encrypted backup was made under
// (nil for a plaintext one). Errors: ErrBackupDamaged, ErrBackupFormat,
// ErrBackupKey, an I/O error (wrapped), ctx's error.
func VerifyBackup(ctx context.Context, path string, key []byte) (BackupInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("badger: %w", err)
	}
	defer f.Close()
	info, err := readBackup(ctx, f, key, nil)
	if err != nil {
		return info, fmt.Errorf("%w: %s", err, path)
	}
	return info, nil
}

// RestoreBackup makes opts.Dir a copy of the database backed up in the file at
// path. opts.Dir must not exist or be an empty directory (else
// ErrNotEmpty); its parent is created if missing. The file is verified
// whole first (VerifyBackup), then loaded into a new temporary directory
// beside opts.Dir, which is renamed to opts.Dir once loaded and verified
// again: a failed restore leaves opts.Dir as it was and no temporary
// directory behind. opts.EncryptionKey decrypts an encrypted backup and
// encrypts the new directory at rest (a plaintext backup restored with a
// key makes an encrypted directory). Other fields of opts apply to the
// database opened for loading. Loading asks Room as every write does: on
// a filesystem without room for the records and Badger's reserve it stops
// with ErrNoSpace. Errors: ErrNotEmpty, ErrBackupDamaged, ErrBackupFormat,
// ErrBackupKey, ErrNoSpace, ctx's error, I/O and Badger errors (wrapped).
func RestoreBackup(ctx context.Context, path string, opts Options) (BackupInfo, error) {
	if opts.Dir == "" || opts.InMemory {
		return BackupInfo{}, errors.New("badger: restore: Options.Dir is empty")
	}
	dir := filepath.Clean(opts.Dir)
	if err := checkEmptyTarget(dir); err != nil {
		return BackupInfo{}, err
	}
	info, err := VerifyBackup(ctx, path, opts.EncryptionKey)
	if err != nil {
		return info, err
	}
	f, err := os.Open(path)
	if err != nil {
		return info, fmt.Errorf("badger: %w", err)
	}
	defer f.Close()
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return info, fmt.Errorf("badger: restore: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".restore-*")
	if err != nil {
		return info, fmt.Errorf("badger: restore: %w", err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	o := opts
	o.Dir, o.NoCompactOnOpen = tmp, true
	db, err := Open(o)
	if err != nil {
		return info, err
	}
	wb := db.db.NewWriteBatch()
	// Room before every restoreRoomEvery bytes (and the first record):
	// Badger writes through mapped files, and a restore onto a disk too
	// small for it would otherwise end by SIGBUS, leaving tmp behind
	var unchecked int64
	_, err = readBackup(ctx, f, opts.EncryptionKey, func(r backupRecord) error {
		n := int64(len(r.key) + len(r.value))
		if unchecked == 0 || unchecked+n >= restoreRoomEvery {
			if err := db.Room(unchecked + n); err != nil {
				return err
			}
			unchecked = 0
		}
		unchecked += n
		e := bg.NewEntry(append([]byte(nil), r.key...), append([]byte(nil), r.value...)).WithMeta(r.userMeta)
		e.ExpiresAt = r.expiresAt
		return wb.SetEntry(e)
	})
	if err == nil {
		err = wb.Flush()
	} else {
		wb.Cancel()
	}
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("badger: restore: close: %w", cerr)
	}
	if err != nil {
		return info, fmt.Errorf("badger: restore %s: %w", path, err)
	}
	// rename(2) replaces an empty directory; elsewhere remove it first
	if err := os.Rename(tmp, dir); err != nil {
		if rmErr := os.Remove(dir); rmErr != nil || os.Rename(tmp, dir) != nil {
			return info, fmt.Errorf("badger: restore: rename %s: %w", tmp, err)
		}
	}
	done = true
	if d, err := os.Open(parent); err == nil {
		d.Sync()
		d.Close()
	}
	return info, nil
}

// restoreRoomEvery is how many bytes of records RestoreBackup loads
// between two Room checks; spaceMargin covers them.
const restoreRoomEvery = 256 << 10

// checkEmptyTarget returns nil when dir does not exist or is an empty
// directory, ErrNotEmpty (or the stat error) otherwise.
func checkEmptyTarget(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("badger: restore: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrNotEmpty, dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("badger: restore: %w", err)
	}
	if len(ents) > 0 {
		return fmt.Errorf("%w: %s holds %d entries (%s, ...)", ErrNotEmpty, dir, len(ents), ents[0].Name())
	}
	return nil
}
