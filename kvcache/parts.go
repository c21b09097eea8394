package kvcache

import (
	"encoding/binary"
	"fmt"
	goruntime "runtime"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sync/errgroup"
)

// partsDecoder decodes a blob that arrives as consecutive parts (the
// Badger values a stored blob is split into, each readable only while
// Badger lends it) without joining them first: the payload is copied
// (CodecRaw) or its zstd segments decoded (CodecZstdShuffle2Seg) from each
// part straight into the state, on every core, while the blob checksum
// runs over the part, and the state checksum over what the part completed
// while Badger reads the next part (for CodecRaw read against its pack
// record, the blob checksum stands for the state checksum: parse). Against Decode this saves a copy of
// the blob (and the memory to hold it) and the serial phases (copy, blob
// checksum, state checksum) one after the other.
//
// It accepts exactly the blobs Decode accepts, with the same states, and
// refuses the rest with ErrCorrupt or ErrVersion (FuzzDecode,
// FuzzDecodeFramed). Because the checksum is known only at the end, the
// header is parsed before it is verified; any error found before the end
// is held, and a failed checksum is reported in its place, as Decode does.
// CodecZstdShuffle2 (states of one segment at most) is gathered and
// decoded at the end. Not safe for concurrent use.
type partsDecoder struct {
	total  int            // blob length, bytes
	off    int            // blob bytes consumed
	expect *Header        // when set, the header must agree (the pack record)
	err    error          // first error; later parts are only summed
	sum    *xxhash.Digest // of blob[0, total-8)
	tail   []byte         // blob[total-8, total): the checksum written
	head   []byte         // blob[0, 10+hl+8) gathered until parsed
	ready  bool           // header parsed
	h      Header         //
	payOff int            // payload offset in the blob
	payLen int            // payload length
	state  []byte         // the decoded state (RawBytes)
	rawSum *xxhash.Digest // of state[0, summed)
	// rawByBlob: the state checksum is implied by the blob checksum and
	// is not computed (see parse)
	rawByBlob bool
	summed    int            // state bytes summed
	final     int            // state bytes final (copied or decoded): [summed, final) is summed next
	gather    []byte         // CodecZstdShuffle2: the payload
	table     []byte         // CodecZstdShuffle2Seg: the table gathered (8 + 8n bytes)
	n, seg    int            // segment count and size
	offs      []int          // payload offsets of the frames and the end
	next      int            // first frame not yet decoded
	frame     []byte         // bytes of frame next gathered across parts
	frameBuf  *[]byte        // frame's pooled buffer
	scr       []*[]byte      // pooled buffers lent to straddling frames of this part
	g         errgroup.Group // decode tasks of the current part
	wg        sync.WaitGroup // blob checksum task of the current part
	sumWG     sync.WaitGroup // the state checksum task, which outlives a part's write
	pre       error          // bad magic or version: reported before the checksum, as Decode does
	// readNs holds, per readBlock of the parts of at least 64 KiB, the
	// time the blob checksum took over it, ns per byte (readRate: their
	// median is the read cost).
	readNs []float64
	// alloc gives the buffers of the state and of a lossy pack's
	// dequantized state (n bytes, each written in full before use).
	alloc func(n int) []byte
}

// readBlock is the block of a part that one read-cost sample times: small
// enough that most blocks run without being descheduled on a loaded
// machine (a time slice is milliseconds; 1 MiB hashes in about 0.1 ms).
const readBlock = 1 << 20

// newPartsDecoder starts decoding a blob of total bytes. expect, when not
// nil, is the header the blob must carry (its pack record): the state is
// allocated only when the blob's header agrees with it on size, checksum
// and identity, so one damaged header cannot make a read allocate up to
// MaxRawBytes before the blob checksum fails.
func newPartsDecoder(total int, expect *Header) *partsDecoder {
	p := &partsDecoder{total: total, expect: expect, sum: xxhash.New(), rawSum: xxhash.New(), alloc: func(n int) []byte { return make([]byte, n) }}
	if total < 4+2+4+8+8 {
		p.err = fmt.Errorf("%w: bad magic or %d bytes", ErrCorrupt, total)
	}
	p.g.SetLimit(goruntime.GOMAXPROCS(0))
	return p
}

func (p *partsDecoder) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

// write consumes the next part of the blob. The part is not used after
// write returns. It returns an error only when parts overrun the blob.
func (p *partsDecoder) write(v []byte) error {
	start := p.off
	if len(v) > p.total-start {
		return fmt.Errorf("%w: blob longer than its %d bytes", ErrCorrupt, p.total)
	}
	p.off += len(v)
	bodyEnd := max(p.total-8, 0)
	body := v[:max(0, min(len(v), bodyEnd-start))]
	if start+len(v) > bodyEnd {
		p.tail = append(p.tail, v[max(0, bodyEnd-start):]...)
	}
	if len(body) < 1<<16 {
		p.sum.Write(body) // not worth a goroutine
	} else {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for i := 0; i < len(body); i += readBlock {
				blk := body[i:min(len(body), i+readBlock)]
				start := time.Now()
				p.sum.Write(blk)
				if len(blk) == readBlock {
					// read after p.wg.Wait
					p.readNs = append(p.readNs, float64(time.Since(start).Nanoseconds())/readBlock)
				}
			}
		}()
	}
	if p.err == nil && !p.ready {
		p.readHead(body)
	}
	if p.err == nil && p.ready {
		a, b := max(start, p.payOff), min(start+len(body), p.payOff+p.payLen)
		if a < b {
			p.payloadPart(v[a-start:b-start], a-p.payOff)
		}
	}
	if err := p.g.Wait(); err != nil {
		p.fail(err)
	}
	p.wg.Wait()
	for _, b := range p.scr {
		putScratch(b)
	}
	p.scr = p.scr[:0]
	if p.err == nil && p.summed < p.final && !p.rawByBlob {
		// the state this part completed is summed while Badger reads (and
		// checks) the next part, one range after the other
		s := p.state[p.summed:p.final]
		p.summed = p.final
		p.sumWG.Wait()
		p.sumWG.Add(1)
		go func() { defer p.sumWG.Done(); p.rawSum.Write(s) }()
	}
	return nil
}

// wait waits for the state checksum of the parts written so far; after
// it the state is no longer read. finish calls it; a reader that stops
// before finish calls it before the state's buffer is reused.
func (p *partsDecoder) wait() { p.sumWG.Wait() }

// readHead gathers and parses magic, version, header and payload length
// from body, the part's bytes before the checksum.
func (p *partsDecoder) readHead(body []byte) {
	for len(body) > 0 && !p.ready && p.err == nil {
		want := 10
		if len(p.head) >= 10 {
			want = 10 + int(binary.LittleEndian.Uint32(p.head[6:])) + 8
		}
		k := min(len(body), want-len(p.head))
		p.head, body = append(p.head, body[:k]...), body[k:]
		if len(p.head) == 10 {
			if string(p.head[:4]) != magic {
				p.pre = fmt.Errorf("%w: bad magic or %d bytes", ErrCorrupt, p.total)
				p.fail(p.pre)
				return
			}
			if err := checkVersion(binary.LittleEndian.Uint16(p.head[4:]), readVersions...); err != nil {
				p.pre = err
				p.fail(p.pre)
				return
			}
			if hl := int(binary.LittleEndian.Uint32(p.head[6:])); hl > maxHeader || 10+hl+8 > p.total-8 {
				p.fail(fmt.Errorf("%w: header length %d", ErrCorrupt, hl))
				return
			}
		} else if len(p.head) == want {
			p.parse()
		}
	}
}

// parse checks the gathered header and prepares the payload's codec.
func (p *partsDecoder) parse() {
	hl := len(p.head) - 18
	p.payOff = 10 + hl + 8
	p.payLen = p.total - 8 - p.payOff
	h, err := parseHeader(binary.LittleEndian.Uint16(p.head[4:]), p.head[10:10+hl], binary.LittleEndian.Uint64(p.head[10+hl:]), p.payLen)
	if err != nil {
		p.fail(err)
		return
	}
	if e := p.expect; e != nil && (h.RawBytes != e.RawBytes || h.RawXXHash != e.RawXXHash || h.Codec != e.Codec ||
		h.TokensHash != e.TokensHash || h.KV != e.KV || h.AdapterKey != e.AdapterKey || h.Scope != e.Scope ||
		!lossyEq(h.Lossy, e.Lossy) || h.StateBytes != e.StateBytes) {
		p.fail(fmt.Errorf("%w: blob header does not match its pack record", ErrCorrupt))
		return
	}
	p.h, p.ready = h, true
	switch h.Codec {
	case CodecRaw:
		// The state is the payload, copied, and the payload is covered by
		// the blob checksum. When the blob is read for its pack record
		// (expect), the header's RawXXHash equals the record's, which Put
		// computed over the very bytes it wrote as this payload (encode):
		// a payload that passes the blob checksum therefore has that
		// RawXXHash, and summing the state again would re-verify bytes
		// already verified (8 ms of CPU per 128 MiB read). Without a record
		// (Decode's callers: shared and imported blobs, whose header may
		// come from elsewhere) the state is summed as Decode sums it.
		p.rawByBlob = p.expect != nil
		p.state = p.alloc(int(h.RawBytes))
	case CodecZstdShuffle2:
		p.gather = make([]byte, 0, p.payLen)
	}
}

// payloadPart handles pv, the payload bytes [po, po+len(pv)) in this part.
func (p *partsDecoder) payloadPart(pv []byte, po int) {
	switch p.h.Codec {
	case CodecRaw:
		// copied in pieces on every core; summed by the next part
		const piece = 4 << 20
		for i := 0; i < len(pv); i += piece {
			src, dst := pv[i:min(len(pv), i+piece)], p.state[po+i:]
			p.g.Go(func() error { copy(dst, src); return nil })
		}
		p.final = po + len(pv)
	case CodecZstdShuffle2:
		p.gather = append(p.gather, pv...)
	case CodecZstdShuffle2Seg:
		p.segPart(pv, po)
	}
}

// segPart decodes the segments whose frames end in pv (payload bytes [po,
// po+len(pv))): in place when the frame lies in pv, else from the bytes
// gathered across parts.
func (p *partsDecoder) segPart(pv []byte, po int) {
	if p.offs == nil {
		want := 8
		if len(p.table) >= 8 {
			want = 8 + 8*p.n
		}
		for len(pv) > 0 && p.offs == nil {
			k := min(len(pv), want-len(p.table))
			p.table, pv, po = append(p.table, pv[:k]...), pv[k:], po+k
			if len(p.table) == 8 {
				n, seg, err := segHead(p.table, p.payLen, int(p.h.RawBytes))
				if err != nil {
					p.fail(err)
					return
				}
				p.n, p.seg, want = n, seg, 8+8*n
			}
			if len(p.table) == want && want > 8 {
				offs, err := segFrames(p.table, p.n, p.payLen)
				if err != nil {
					p.fail(err)
					return
				}
				p.offs = offs
				p.state = p.alloc(int(p.h.RawBytes))
			}
		}
	}
	_, d := codecs()
	for len(pv) > 0 && p.next < p.n {
		i := p.next
		size := p.offs[i+1] - p.offs[i]
		var f []byte
		if p.frameBuf == nil && size <= len(pv) {
			f, pv = pv[:size], pv[size:] // the whole frame in this part
		} else {
			if p.frameBuf == nil {
				p.frameBuf = getScratch(size)
				p.frame = (*p.frameBuf)[:0]
			}
			k := min(len(pv), size-len(p.frame))
			p.frame, pv = append(p.frame, pv[:k]...), pv[k:]
			if len(p.frame) < size {
				return // continues in the next part
			}
			f = p.frame
			p.scr = append(p.scr, p.frameBuf) // back to the pool after this part
			p.frameBuf, p.frame = nil, nil
		}
		dst := p.state[i*p.seg : min(int(p.h.RawBytes), (i+1)*p.seg)]
		p.g.Go(func() error { return decodeSegment(d, i, f, dst) })
		p.next++
		p.final = min(int(p.h.RawBytes), p.next*p.seg)
	}
}

// finish checks the blob checksum, then whatever else failed, and returns
// the header and state.
func (p *partsDecoder) finish() (Header, []byte, error) {
	p.wait()
	if p.off != p.total {
		return p.h, nil, fmt.Errorf("%w: %d of %d bytes", ErrCorrupt, p.off, p.total)
	}
	if p.total < 4+2+4+8+8 {
		return p.h, nil, p.err
	}
	if p.pre != nil {
		return p.h, nil, p.pre
	}
	if got, want := p.sum.Sum64(), binary.LittleEndian.Uint64(p.tail); got != want {
		return p.h, nil, fmt.Errorf("%w: checksum %016x, want %016x", ErrCorrupt, got, want)
	}
	if p.err != nil {
		return p.h, nil, p.err
	}
	h := p.h
	switch h.Codec {
	case CodecZstdShuffle2:
		_, d := codecs()
		raw, err := d.DecodeAll(p.gather, make([]byte, 0, h.RawBytes))
		if err != nil {
			return h, nil, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
		}
		if int64(len(raw)) != h.RawBytes {
			return h, nil, fmt.Errorf("%w: %d raw bytes, header says %d", ErrCorrupt, len(raw), h.RawBytes)
		}
		p.state = p.alloc(len(raw))
		unshuffle2Into(p.state, raw)
		p.final = len(p.state)
	case CodecZstdShuffle2Seg:
		if p.next != p.n {
			return h, nil, fmt.Errorf("%w: %d of %d segments", ErrCorrupt, p.next, p.n)
		}
	}
	if p.state == nil {
		p.state = []byte{}
	}
	if p.rawByBlob {
		return dequantizeWith(h, p.state, p.alloc)
	}
	p.rawSum.Write(p.state[p.summed:])
	if p.rawSum.Sum64() != h.RawXXHash {
		return h, nil, fmt.Errorf("%w: raw state checksum", ErrCorrupt)
	}
	return dequantizeWith(h, p.state, p.alloc)
}

// decodeParts decodes a blob of total bytes given as parts (tests).
func decodeParts(parts [][]byte, total int, expect *Header) (Header, []byte, error) {
	p := newPartsDecoder(total, expect)
	defer p.wait()
	for _, v := range parts {
		if err := p.write(v); err != nil {
			return Header{}, nil, err
		}
	}
	return p.finish()
}
