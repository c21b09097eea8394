package kvcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	goruntime "runtime"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/zstd"

	"github.com/memosrt/memosrt/runtime"
)

// Blob layout, format versions 1 to 3 (all integers little-endian):
//
//	[0,4)    magic "MKVB"
//	[4,6)    format version (uint16): 1 exact, 2 lossy, 3 composed
//	[6,10)   header length H (uint32)
//	[10,10+H) header, JSON (Header)
//	next 8   payload length P (uint64)
//	next P   payload: the state as Codec says (zstd of the byte-shuffled
//	         state, or the state itself)
//	last 8   xxhash64 of every byte before it
//
// Version 2 is a lossy pack: its header carries the lossy codec and its
// parameters (Header.Lossy) and the length of the state it dequantizes to
// (Header.StateBytes); the payload, under Codec as in version 1, is the
// quantized stream of Quantize (RawBytes and RawXXHash describe that
// stream), and decoding dequantizes it (Dequantize) to an f16 state of
// the live KV type. Version 3 is a composed pack (Header.Composed: KV
// placed from memory chunks, approximate after Composition.First), exact
// or lossy as its header's Lossy says, its payload as in version 1 or 2.
// Each version is written only for what needs it: an exact prefill's pack
// is still version 1, byte for byte as before, and a lossy one version 2,
// so a build that reads fewer versions still reads every pack it can
// understand and refuses the others with ErrVersion (its version check),
// never a state it would misread (a build reading 1 and 2 only would
// otherwise restore a composed pack as an exact one). Versions 1 and 2
// with a Composed header, as the builds that added composition before
// version 3 wrote them, are read as composed packs.
const (
	magic = "MKVB"
	// FormatVersion is the newest blob format this build writes and
	// reads; it reads every version from FormatVersionExact on.
	FormatVersion = FormatVersionComposed
	// FormatVersionExact is the format of exact packs (no Header.Lossy,
	// no Header.Composed).
	FormatVersionExact = 1
	// FormatVersionLossy is the format of lossy packs (Header.Lossy, no
	// Header.Composed).
	FormatVersionLossy = 2
	// FormatVersionComposed is the format of composed packs
	// (Header.Composed), exact or lossy.
	FormatVersionComposed = 3
	// CodecZstdShuffle2 is zstd over the state split into its even and odd
	// bytes (a byte shuffle of 16-bit words, as Blosc's shuffle filter does):
	// the high bytes of f16 values are far more regular than the low bytes.
	CodecZstdShuffle2 = "zstd+shuffle2"
	// CodecZstdShuffle2Seg is CodecZstdShuffle2 per segment of segBytes of
	// the state, each its own zstd frame, so that segments encode and
	// decode on every core at once (a state larger than one segment).
	// Payload: segment count (u32), segment size (u32), each frame's length
	// (u64 each), the frames.
	CodecZstdShuffle2Seg = "zstd+shuffle2/seg"
	// CodecRaw is the state itself. Encode chooses it when zstd saves
	// under rawBelowSaving of it, as on random-weight models' KV (about
	// 1.05x), where decompressing would cost restore time for almost no
	// bytes; Cache.Put chooses it for a state of at least 4 MiB when
	// reading the state raw costs less than reading the compressed payload
	// and decoding it, as measured on this machine (codecCosts). Decode
	// then returns the payload without a copy.
	CodecRaw = "raw"
	// rawBelowSaving: a compressed payload must be at most this fraction
	// of the state, or the state is stored raw.
	rawBelowSaving = 0.9
	// MaxRawBytes bounds a decoded state (8 GiB), so a hostile header cannot
	// make Decode allocate without limit.
	MaxRawBytes = 8 << 30
	maxHeader   = 64 << 20
)

// Header is the JSON header of a blob: everything needed to decide, before
// touching llama.cpp, whether the state can restore into a live context.
type Header struct {
	KV         runtime.KVConfig `json:"kv"`
	AdapterKey string           `json:"adapter_key"` // active LoRA set and scales ("" = none)
	NTokens    int              `json:"n_tokens"`    // tokens (= cells) in the state
	NCtxNeeded int              `json:"n_ctx_needed"`
	Tokens     []int32          `json:"tokens"`
	TokensHash string           `json:"tokens_hash"` // hex sha256 of the token ids
	Codec      string           `json:"codec"`
	RawBytes   int64            `json:"raw_bytes"` // length of the uncompressed state
	RawXXHash  uint64           `json:"raw_xxhash"`
	Created    time.Time        `json:"created"`
	Label      string           `json:"label,omitempty"` // e.g. the cube the pack belongs to
	// Scope is the isolation domain (the cube): a pack is only ever found by
	// lookups in the same scope ("" = unscoped), so one cube can never
	// restore, or probe through cached-token counts, another cube's pack.
	Scope string `json:"scope,omitempty"`
	// Lossy, in a version 2 blob, is the quantization the payload went
	// through (nil: exact, version 1). Put quantizes with it when set;
	// a state that holds no f16 K and V is stored exact instead.
	Lossy *LossyParams `json:"lossy,omitempty"`
	// StateBytes, with Lossy, is the length of the dequantized state.
	StateBytes int64 `json:"state_bytes,omitempty"`
	// Composed, when set, says the state was composed from memory chunks
	// (WarmOptions.Compose) rather than prefilled: approximate in
	// [First, First+Tokens), exact before. Nil: a prefill's state.
	Composed *Composition `json:"composed,omitempty"`
}

// Composition is how a pack's state was composed from KV chunks of its
// members (runtime.Engine.ComposeSeq) instead of prefilled. Counts are
// tokens.
type Composition struct {
	First      int     `json:"first"`      // positions [0, First) are a prefill's, exact
	Tokens     int     `json:"tokens"`     // chunk tokens placed at [First, First+Tokens)
	Recomputed int     `json:"recomputed"` // of them, decoded again (the probe's choice)
	Ratio      float64 `json:"ratio"`      // recompute fraction asked (0: shift only)
}

// KVCodec names the pack's KV codec: "exact", or "q8", "q4", "q2" for a
// lossy pack of that many bits.
func (h Header) KVCodec() string {
	if h.Lossy == nil {
		return "exact"
	}
	return fmt.Sprintf("q%d", h.Lossy.Bits)
}

// version is the blob format h is written in.
func (h Header) version() uint16 {
	switch {
	case h.Composed != nil:
		return FormatVersionComposed
	case h.Lossy != nil:
		return FormatVersionLossy
	}
	return FormatVersionExact
}

// readVersions are the blob format versions this build reads.
var readVersions = []uint16{FormatVersionExact, FormatVersionLossy, FormatVersionComposed}

// checkVersion refuses a blob format version v that a build reading the
// versions in reads cannot read, with ErrVersion. This build passes
// readVersions; a version 1 build's check was this one with 1 alone, a
// version 2 build's with 1 and 2.
func checkVersion(v uint16, reads ...uint16) error {
	for _, r := range reads {
		if v == r {
			return nil
		}
	}
	return fmt.Errorf("%w: %d (this build reads %v)", ErrVersion, v, reads)
}

// ConfigKey is the hex key of the KV config and adapter set under which a
// state is valid; it seeds the prefix hash chain. n_ctx is left out: a state
// restores into any context with at least NCtxNeeded cells.
func ConfigKey(kv runtime.KVConfig, adapterKey string) string {
	kv.NCtx = 0
	b, _ := json.Marshal(struct {
		KV runtime.KVConfig
		A  string
	}{kv, adapterKey})
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// ScopedKey seeds the prefix chain of one scope: cfgKey itself for the
// empty scope, else a hash of both.
func ScopedKey(cfgKey, scope string) string {
	if scope == "" {
		return cfgKey
	}
	s := sha256.Sum256([]byte(cfgKey + "\x00scope\x00" + scope))
	return hex.EncodeToString(s[:])
}

// TokensHash returns the hex sha256 of token ids (little-endian int32).
func TokensHash(toks []int32) string {
	h := sha256.New()
	var b [4]byte
	for _, t := range toks {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

var (
	encOnce sync.Once
	enc     *zstd.Encoder
	dec     *zstd.Decoder
)

// codecs returns the package's zstd encoder and decoder. The encoder's
// window is segBytes: every input it compresses is at most one segment
// (encode), so no match is farther back and the frames are those of the
// level's 8 MiB default window, byte for byte (TestEncoderWindow), while
// each of its two pooled encoders keeps 8 MiB of history on the heap
// instead of 16.
func codecs() (*zstd.Encoder, *zstd.Decoder) {
	encOnce.Do(func() {
		enc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(2),
			zstd.WithWindowSize(segBytes))
		// DecodeAll writes at most cap(dst) bytes (Decode passes RawBytes):
		// a hostile frame content size cannot make it allocate more.
		dec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(MaxRawBytes),
			zstd.WithDecodeAllCapLimit(true))
	})
	return enc, dec
}

// shuffle2 splits b into its even bytes then its odd bytes.
func shuffle2(b []byte) []byte {
	out := make([]byte, len(b))
	half := len(b) / 2
	lo, hi := out[:half], out[half:2*half]
	i := 0
	for ; i+8 <= half; i += 8 {
		x := binary.LittleEndian.Uint64(b[2*i:])
		y := binary.LittleEndian.Uint64(b[2*i+8:])
		binary.LittleEndian.PutUint32(lo[i:], gather(x))
		binary.LittleEndian.PutUint32(lo[i+4:], gather(y))
		binary.LittleEndian.PutUint32(hi[i:], gather(x>>8))
		binary.LittleEndian.PutUint32(hi[i+4:], gather(y>>8))
	}
	for ; i < half; i++ {
		lo[i], hi[i] = b[2*i], b[2*i+1]
	}
	if len(b)%2 == 1 {
		out[len(b)-1] = b[len(b)-1]
	}
	return out
}

// unshuffle2 is shuffle2's inverse.
func unshuffle2(s []byte) []byte {
	out := make([]byte, len(s))
	unshuffle2Into(out, s)
	return out
}

// unshuffle2Into writes shuffle2's inverse of s into out (len(out) == len(s)).
func unshuffle2Into(out, s []byte) {
	half := len(s) / 2
	lo, hi := s[:half], s[half:2*half]
	i := 0
	for ; i+8 <= half; i += 8 {
		a := binary.LittleEndian.Uint64(lo[i:])
		b := binary.LittleEndian.Uint64(hi[i:])
		binary.LittleEndian.PutUint64(out[2*i:], spread(uint32(a))|spread(uint32(b))<<8)
		binary.LittleEndian.PutUint64(out[2*i+8:], spread(uint32(a>>32))|spread(uint32(b>>32))<<8)
	}
	for ; i < half; i++ {
		out[2*i], out[2*i+1] = lo[i], hi[i]
	}
	if len(s)%2 == 1 {
		out[len(s)-1] = s[len(s)-1]
	}
}

// spread puts the 4 bytes of x at the even byte positions of a uint64.
func spread(x uint32) uint64 {
	v := uint64(x)
	v = (v | v<<16) & 0x0000FFFF0000FFFF
	return (v | v<<8) & 0x00FF00FF00FF00FF
}

// gather is spread's inverse: the even bytes of x (its low byte first).
func gather(x uint64) uint32 {
	x &= 0x00FF00FF00FF00FF
	x = (x | x>>8) & 0x0000FFFF0000FFFF
	return uint32(x | x>>16)
}

// Encode wraps state (llama_state_seq_get_data bytes) in a blob. Fields of h
// derived from state (codec, sizes, hashes) are filled in. The state is
// stored raw when zstd would save less than a tenth of it (a blob for
// export or transfer, where its size counts; Cache.Put chooses by
// restore cost instead).
func Encode(h Header, state []byte) ([]byte, error) {
	_, blob, err := encode(h, state, sizeRule)
	return blob, err
}

// encode is Encode that also returns the header as written; keepRaw
// decides between the compressed payload and the state itself.
func encode(h Header, state []byte, keepRaw rawRule) (Header, []byte, error) {
	if int64(len(state)) > MaxRawBytes {
		return h, nil, fmt.Errorf("%w: %d bytes", ErrTooLarge, len(state))
	}
	var stateBytes int64
	if h.Lossy != nil {
		q, ok, err := Quantize(state, *h.Lossy)
		if err != nil {
			return h, nil, err
		}
		if ok {
			stateBytes, state = int64(len(state)), q
		} else {
			h.Lossy = nil // no f16 K and V: stored exact
		}
	}
	h.StateBytes = stateBytes
	e, _ := codecs()
	var payload []byte
	if len(state) > segBytes {
		h.Codec, payload = CodecZstdShuffle2Seg, encodeSegments(e, state, segBytes)
	} else {
		h.Codec, payload = CodecZstdShuffle2, e.EncodeAll(shuffle2(state), nil)
	}
	if keepRaw(state, payload, h.Codec) {
		h.Codec, payload = CodecRaw, state
	}
	h.RawBytes = int64(len(state))
	h.RawXXHash = xxhash.Sum64(state)
	h.NTokens = len(h.Tokens)
	h.TokensHash = TokensHash(h.Tokens)
	if h.NCtxNeeded < h.NTokens {
		h.NCtxNeeded = h.NTokens
	}
	hj, err := json.Marshal(h)
	if err != nil {
		return h, nil, fmt.Errorf("kvcache: header: %w", err)
	}
	return h, frameBlob(hj, payload, h.version()), nil
}

// frameBlob lays out a blob: magic, format version (u16), header length (u32),
// header JSON, payload length (u64), payload, xxhash64 of all before (u64),
// little-endian.
func frameBlob(hj, payload []byte, version uint16) []byte {
	var buf bytes.Buffer
	buf.Grow(4 + 2 + 4 + len(hj) + 8 + len(payload) + 8)
	buf.WriteString(magic)
	binary.Write(&buf, binary.LittleEndian, version)
	binary.Write(&buf, binary.LittleEndian, uint32(len(hj)))
	buf.Write(hj)
	binary.Write(&buf, binary.LittleEndian, uint64(len(payload)))
	buf.Write(payload)
	binary.Write(&buf, binary.LittleEndian, xxhash.Sum64(buf.Bytes()))
	return buf.Bytes()
}

// DecodeHeader checks a blob's framing and checksum and returns its header
// without decompressing the payload. Errors wrap ErrCorrupt or ErrVersion.
func DecodeHeader(blob []byte) (Header, []byte, error) {
	var h Header
	if len(blob) < 4+2+4+8+8 || string(blob[:4]) != magic {
		return h, nil, fmt.Errorf("%w: bad magic or %d bytes", ErrCorrupt, len(blob))
	}
	v := binary.LittleEndian.Uint16(blob[4:])
	if err := checkVersion(v, readVersions...); err != nil {
		return h, nil, err
	}
	body := blob[:len(blob)-8]
	if got, want := xxhash.Sum64(body), binary.LittleEndian.Uint64(blob[len(blob)-8:]); got != want {
		return h, nil, fmt.Errorf("%w: checksum %016x, want %016x", ErrCorrupt, got, want)
	}
	hl := int(binary.LittleEndian.Uint32(blob[6:]))
	if hl > maxHeader || 10+hl+8 > len(body) {
		return h, nil, fmt.Errorf("%w: header length %d", ErrCorrupt, hl)
	}
	h, err := parseHeader(v, body[10:10+hl], binary.LittleEndian.Uint64(body[10+hl:]), len(body)-10-hl-8)
	if err != nil {
		return h, nil, err
	}
	return h, body[10+hl+8:], nil
}

// parseHeader parses the header JSON hj of a blob of format version v
// and checks it against the payload length pl written after it and the
// have bytes that follow. Errors wrap ErrCorrupt or ErrVersion.
func parseHeader(v uint16, hj []byte, pl uint64, have int) (Header, error) {
	var h Header
	if err := json.Unmarshal(hj, &h); err != nil {
		return h, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	if v != FormatVersionComposed && (v == FormatVersionLossy) != (h.Lossy != nil) {
		return h, fmt.Errorf("%w: format version %d with lossy codec %q", ErrCorrupt, v, h.KVCodec())
	}
	if v == FormatVersionComposed && h.Composed == nil {
		return h, fmt.Errorf("%w: format version %d without a composition", ErrCorrupt, v)
	}
	if c := h.Composed; c != nil && (c.First < 0 || c.Tokens < 0 || c.Recomputed < 0) {
		return h, fmt.Errorf("%w: composition %+v of a %d-token pack", ErrCorrupt, *c, len(h.Tokens))
	}
	if h.Lossy != nil {
		if err := h.Lossy.check(); err != nil {
			return h, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		if h.StateBytes <= 0 || h.StateBytes > MaxRawBytes || h.StateBytes > 8*h.RawBytes {
			return h, fmt.Errorf("%w: lossy state of %d bytes", ErrCorrupt, h.StateBytes)
		}
	} else if h.StateBytes != 0 {
		return h, fmt.Errorf("%w: exact pack with a state length", ErrCorrupt)
	}
	if pl != uint64(have) {
		return h, fmt.Errorf("%w: payload length %d, have %d", ErrCorrupt, pl, have)
	}
	if h.Codec != CodecZstdShuffle2 && h.Codec != CodecZstdShuffle2Seg && h.Codec != CodecRaw {
		return h, fmt.Errorf("%w: codec %q", ErrVersion, h.Codec)
	}
	if h.Codec == CodecRaw && uint64(h.RawBytes) != pl {
		return h, fmt.Errorf("%w: raw payload of %d bytes, header says %d", ErrCorrupt, pl, h.RawBytes)
	}
	if h.RawBytes < 0 || h.RawBytes > MaxRawBytes || h.NTokens != len(h.Tokens) || TokensHash(h.Tokens) != h.TokensHash {
		return h, fmt.Errorf("%w: header fields inconsistent", ErrCorrupt)
	}
	// Every zstd block yields at most 128 KiB and takes at least 4 bytes (an
	// RLE block, RFC 8878 §3.1.1.2), so a payload expands at most 32768
	// times: a larger RawBytes is a lie that would make Decode allocate it.
	if h.RawBytes > 32768*int64(pl) {
		return h, fmt.Errorf("%w: %d raw bytes cannot come from a %d-byte payload", ErrCorrupt, h.RawBytes, pl)
	}
	return h, nil
}

// Decode checks and unpacks a blob into its header and the raw state. For
// CodecRaw the state is a slice of blob (no copy): do not change blob
// while the state is in use. Errors wrap ErrCorrupt or ErrVersion.
func Decode(blob []byte) (Header, []byte, error) {
	h, payload, err := DecodeHeader(blob)
	if err != nil {
		return h, nil, err
	}
	if h.Codec == CodecRaw {
		if xxhash.Sum64(payload) != h.RawXXHash {
			return h, nil, fmt.Errorf("%w: raw state checksum", ErrCorrupt)
		}
		if h.Lossy != nil {
			return dequantize(h, payload)
		}
		return h, payload, nil // shares blob's memory
	}
	_, d := codecs()
	if h.Codec == CodecZstdShuffle2Seg {
		raw, err := decodeSegments(d, payload, int(h.RawBytes))
		if err != nil {
			return h, nil, err
		}
		if xxhash.Sum64(raw) != h.RawXXHash {
			return h, nil, fmt.Errorf("%w: raw state checksum", ErrCorrupt)
		}
		return dequantize(h, raw)
	}
	raw, err := d.DecodeAll(payload, make([]byte, 0, h.RawBytes))
	if err != nil {
		return h, nil, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
	}
	if int64(len(raw)) != h.RawBytes {
		return h, nil, fmt.Errorf("%w: %d raw bytes, header says %d", ErrCorrupt, len(raw), h.RawBytes)
	}
	raw = unshuffle2(raw)
	if xxhash.Sum64(raw) != h.RawXXHash {
		return h, nil, fmt.Errorf("%w: raw state checksum", ErrCorrupt)
	}
	return dequantize(h, raw)
}

// dequantize returns the state of a decoded payload raw: raw itself for an
// exact pack, else Dequantize(raw), which must be h.StateBytes long.
// Errors wrap ErrCorrupt.
func dequantize(h Header, raw []byte) (Header, []byte, error) {
	return dequantizeWith(h, raw, func(n int) []byte { return make([]byte, n) })
}

// dequantizeWith is dequantize with the dequantized state in alloc(n).
func dequantizeWith(h Header, raw []byte, alloc func(n int) []byte) (Header, []byte, error) {
	if h.Lossy == nil {
		return h, raw, nil
	}
	if int64(len(raw)) < 12 || int64(binary.LittleEndian.Uint64(raw[4:])) != h.StateBytes {
		// checked before dequantizeTo allocates the state
		return h, nil, fmt.Errorf("%w: lossy state length does not match the header's %d bytes", ErrCorrupt, h.StateBytes)
	}
	state, err := dequantizeTo(raw, alloc)
	if err != nil {
		return h, nil, err
	}
	return h, state, nil
}

// Check verifies that a pack with header h may restore into a context whose
// live config is kv with the active adapter set adapterKey.
func (h Header) Check(kv runtime.KVConfig, adapterKey string) error {
	if h.AdapterKey != adapterKey {
		return fmt.Errorf("%w: computed under adapters %q, active %q", ErrMismatch, h.AdapterKey, adapterKey)
	}
	if err := h.KV.Compatible(kv, h.NCtxNeeded); err != nil {
		return fmt.Errorf("%w: %w", ErrMismatch, err)
	}
	return nil
}

// segBytes is the state segment of CodecZstdShuffle2Seg: 4 MiB, so a
// 128 MiB state (4,096 tokens of the 1B shape) has 32 to spread over the
// cores.
const segBytes = 4 << 20

// encodeSegments is CodecZstdShuffle2Seg's payload of state in segments
// of seg bytes, compressed in parallel.
func encodeSegments(e *zstd.Encoder, state []byte, seg int) []byte {
	n := (len(state) + seg - 1) / seg
	frames := make([][]byte, n)
	var g errgroup.Group
	g.SetLimit(goruntime.GOMAXPROCS(0))
	for i := range frames {
		g.Go(func() error {
			frames[i] = e.EncodeAll(shuffle2(state[i*seg:min(len(state), (i+1)*seg)]), nil)
			return nil
		})
	}
	g.Wait()
	size := 8 + 8*n
	for _, f := range frames {
		size += len(f)
	}
	out := make([]byte, 0, size)
	out = binary.LittleEndian.AppendUint32(out, uint32(n))
	out = binary.LittleEndian.AppendUint32(out, uint32(seg))
	for _, f := range frames {
		out = binary.LittleEndian.AppendUint64(out, uint64(len(f)))
	}
	for _, f := range frames {
		out = append(out, f...)
	}
	return out
}

// segHead checks the first 8 bytes of a CodecZstdShuffle2Seg payload of
// pl bytes (segment count n, segment size seg) against a state of rawBytes
// and returns them. Errors wrap ErrCorrupt.
func segHead(p []byte, pl, rawBytes int) (n, seg int, err error) {
	if len(p) < 8 || pl < 8 {
		return 0, 0, fmt.Errorf("%w: segment table", ErrCorrupt)
	}
	n, seg = int(binary.LittleEndian.Uint32(p)), int(binary.LittleEndian.Uint32(p[4:]))
	if n < 1 || seg < 1 || n > (pl-8)/8 || (n-1)*seg >= rawBytes || n*seg < rawBytes {
		return 0, 0, fmt.Errorf("%w: %d segments of %d bytes for %d raw bytes", ErrCorrupt, n, seg, rawBytes)
	}
	return n, seg, nil
}

// segFrames returns the payload offsets of a CodecZstdShuffle2Seg
// payload's n frames and its end (n+1 values) from its table (8 + 8n
// bytes): the frames must fill the pl-byte payload exactly. Errors wrap
// ErrCorrupt.
func segFrames(table []byte, n, pl int) ([]int, error) {
	offs := make([]int, n+1)
	offs[0] = 8 + 8*n
	for i := range n {
		l := binary.LittleEndian.Uint64(table[8+8*i:])
		if l > uint64(pl-offs[i]) {
			return nil, fmt.Errorf("%w: segment %d of %d bytes, %d left", ErrCorrupt, i, l, pl-offs[i])
		}
		offs[i+1] = offs[i] + int(l)
	}
	if offs[n] != pl {
		return nil, fmt.Errorf("%w: %d bytes after the last segment", ErrCorrupt, pl-offs[n])
	}
	return offs, nil
}

// decodeSegment decodes frame i of a CodecZstdShuffle2Seg payload into
// dst, its segment of the state, through a pooled scratch buffer. Errors
// wrap ErrCorrupt.
func decodeSegment(d *zstd.Decoder, i int, f, dst []byte) error {
	sp := getScratch(len(dst))
	defer putScratch(sp)
	// cap(dst) bounds what DecodeAll writes (WithDecodeAllCapLimit)
	raw, err := d.DecodeAll(f, (*sp)[:0:len(dst)])
	if err != nil {
		return fmt.Errorf("%w: segment %d: zstd: %v", ErrCorrupt, i, err)
	}
	if len(raw) != len(dst) {
		return fmt.Errorf("%w: segment %d: %d bytes, want %d", ErrCorrupt, i, len(raw), len(dst))
	}
	unshuffle2Into(dst, raw)
	return nil
}

// scratchPool holds decode buffers of segBytes, so that restoring a state
// does not allocate (and page-fault) a second state's worth of memory.
var scratchPool = sync.Pool{New: func() any { b := make([]byte, segBytes); return &b }}

// getScratch returns a pooled buffer of at least n bytes (one of its own
// above segBytes: only hostile tables ask for more).
func getScratch(n int) *[]byte {
	if n > segBytes {
		b := make([]byte, n)
		return &b
	}
	return scratchPool.Get().(*[]byte)
}

func putScratch(b *[]byte) {
	if len(*b) == segBytes {
		scratchPool.Put(b)
	}
}

// decodeSegments decodes a CodecZstdShuffle2Seg payload into a state of
// rawBytes, its segments in parallel. Errors wrap ErrCorrupt.
func decodeSegments(d *zstd.Decoder, p []byte, rawBytes int) ([]byte, error) {
	n, seg, err := segHead(p, len(p), rawBytes)
	if err != nil {
		return nil, err
	}
	offs, err := segFrames(p, n, len(p))
	if err != nil {
		return nil, err
	}
	out := make([]byte, rawBytes)
	var g errgroup.Group
	g.SetLimit(goruntime.GOMAXPROCS(0))
	for i := range n {
		g.Go(func() error {
			return decodeSegment(d, i, p[offs[i]:offs[i+1]], out[i*seg:min(rawBytes, (i+1)*seg)])
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}
