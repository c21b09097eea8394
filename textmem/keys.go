package textmem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Key layout of a cube's records, relative to the cube (a Backend keeps
// cubes apart; the Badger one stores cube c's key k at "t/<c>/<k>"):
//
//	m/<id>               current Memory, JSON
//	h/<id>/<ver 8 hex>   superseded versions of <id>, JSON
//	d/<id>               docMeta: what the index needs per memory
//	p/<term>\x00<id>     posting: uvarint term frequency
//	x/<content hash>     id of the memory with that content
//	v/<id>               embedding vector (see vectors.go)
//	s                    cubeStats: analyzer name, doc count, total length
const (
	nsMem   = 'm'
	nsHist  = 'h'
	nsDoc   = 'd'
	nsPost  = 'p'
	nsHash  = 'x'
	nsVec   = 'v'
	nsStats = 's'
)

func nsPrefix(ns byte) []byte {
	return []byte{ns, '/'}
}

func nsKey(ns byte, id string) []byte {
	return append(nsPrefix(ns), id...)
}

func histPrefix(id string) []byte {
	return append(nsKey(nsHist, id), '/')
}

func histKey(id string, version int) []byte {
	return fmt.Appendf(histPrefix(id), "%08x", version)
}

func postKey(term, id string) []byte {
	k := nsPrefix(nsPost)
	k = append(k, term...)
	k = append(k, 0)
	return append(k, id...)
}

func statsKey() []byte {
	return []byte{nsStats}
}

// docMeta is what the in-memory index keeps of each memory, persisted so
// that loading a cube's index reads no texts.
type docMeta struct {
	length  uint32 // number of terms, for BM25
	created int64  // Unix ns
	event   int64  // Unix ns, 0 if unknown
	kind    string
	source  string
	tags    []string
}

func (d docMeta) encode() []byte {
	b := make([]byte, 0, 32+len(d.kind)+len(d.source))
	b = binary.AppendUvarint(b, uint64(d.length))
	b = binary.AppendVarint(b, d.created)
	b = binary.AppendVarint(b, d.event)
	b = appendString(b, d.kind)
	b = appendString(b, d.source)
	b = binary.AppendUvarint(b, uint64(len(d.tags)))
	for _, t := range d.tags {
		b = appendString(b, t)
	}
	return b
}

var errCorrupt = errors.New("textmem: corrupt index record")

func decodeDocMeta(b []byte) (docMeta, error) {
	var d docMeta
	r := reader{b: b}
	d.length = uint32(r.uvarint())
	d.created = r.varint()
	d.event = r.varint()
	d.kind = r.str()
	d.source = r.str()
	n := r.uvarint()
	if n > uint64(len(b)) {
		return d, errCorrupt
	}
	for range n {
		d.tags = append(d.tags, r.str())
	}
	if r.bad {
		return d, errCorrupt
	}
	return d, nil
}

func metaOf(m Memory, length int) docMeta {
	d := docMeta{
		length:  uint32(length),
		created: m.Created.UnixNano(),
		kind:    m.Kind,
		source:  m.Source,
		tags:    m.Tags,
	}
	if !m.EventTime.IsZero() {
		d.event = m.EventTime.UnixNano()
	}
	return d
}

// cubeStats is the persisted per-cube BM25 collection statistics.
type cubeStats struct {
	analyzer string
	docs     uint64
	totalLen uint64
}

func (s cubeStats) encode() []byte {
	b := appendString(nil, s.analyzer)
	b = binary.AppendUvarint(b, s.docs)
	return binary.AppendUvarint(b, s.totalLen)
}

func decodeStats(b []byte) (cubeStats, error) {
	r := reader{b: b}
	s := cubeStats{analyzer: r.str(), docs: r.uvarint(), totalLen: r.uvarint()}
	if r.bad {
		return s, errCorrupt
	}
	return s, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

type reader struct {
	b   []byte
	bad bool
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) str() string {
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)) {
		r.bad = true
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}
