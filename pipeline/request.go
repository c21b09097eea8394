package pipeline

import (
	"strings"

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

// checkResponseID checks a request's own id (Request.ID).
func checkResponseID(id string) error {
	rest, ok := strings.CutPrefix(id, "resp_")
	if !ok || rest == "" || len(id) > 64 || strings.ContainsFunc(rest, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}) {
		return badField("id", "%q: want resp_ and at most 64 bytes of letters, digits, _ and -", id)
	}
	return nil
}
