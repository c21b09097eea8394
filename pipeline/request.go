package pipeline

import (
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/pipeline/request"
	"github.com/memosrt/memosrt/textmem"
)

// What a request asks and what it answers live in package
// pipeline/request (package memosrt re-exports them from there); these
// are the names the stages use.
type (
	Request  = request.Request
	Response = request.Response
	Usage    = request.Usage
	Message  = request.Message
	Sampling = request.Sampling
	Tool     = request.Tool
)

// Cache sources of a Response (request.Source*).
const (
	SourceNone     = request.SourceNone
	SourceSlot     = request.SourceSlot
	SourceResident = request.SourceResident
	SourceRestored = request.SourceRestored
)

// setMemories reports in r the memories of the prompt p carried: their counts
// and ids (PackMemories, Retrieved, PackMemoryIDs, RetrievedIDs,
// PreferenceIDs).
func setMemories(r *Response, p layout.Prompt) {
	ids := func(ms []textmem.Memory) []string {
		out := make([]string, len(ms))
		for i, m := range ms {
			out[i] = m.ID
		}
		return out
	}
	r.PackMemories, r.Retrieved = len(p.Pack), len(p.Retrieved)
	r.PackMemoryIDs, r.RetrievedIDs, r.PreferenceIDs = ids(p.Pack), ids(p.Retrieved), ids(p.Preferences)
	r.CubeMemories = p.CubeCounts()
}
