package memosrt_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/textmem"
)

// model is the shared test model beside the repository (stories260K, a
// real tiny Llama trained on children's stories).
const model = "../shared/models/stories260K.gguf"

// A memory OS in a data directory, with a model: memories of a cube go
// into its prompts; warmed into the activation tier, the cube's pack is
// restored from KV state instead of prefilled, with the same greedy
// output.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "memosrt-example")
	defer os.RemoveAll(dir)
	mos, err := memosrt.Open(ctx, memosrt.Options{Dir: dir, Model: model, Engine: runtime.Options{NCtx: 1024}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mos.Close(ctx)
	for _, m := range []string{"Lily has a dog named Max.", "Max is brown and likes to run in the park."} {
		if _, err := mos.AddMemory(ctx, "lily", textmem.Memory{Text: m}); err != nil {
			fmt.Println(err)
			return
		}
	}
	if _, err := mos.Warm(ctx, "lily", memosrt.WarmOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	turn := []memosrt.Message{{Role: "user", Content: "Once upon a time, Lily"}}
	warm, err := mos.Chat(ctx, memosrt.Request{Cube: "lily", Messages: turn, NumPredict: 12})
	if err != nil {
		fmt.Println(err)
		return
	}
	cold, _ := mos.Chat(ctx, memosrt.Request{Cube: "lily", Messages: turn, NumPredict: 12, NoCache: true})
	fmt.Println(strings.TrimSpace(warm.Text))
	fmt.Println("from the pack:", warm.CacheSource, warm.Usage.CachedTokens > 0, "same as cold:", warm.Text == cold.Text)
	// Output:
	// and Max were playing in the par
	// from the pack: restored true same as cold: true
}

// Streaming: OnText is called on the caller's goroutine with the text as
// it is generated; the pieces add up to the response.
func ExampleOS_Generate() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "memosrt-example")
	defer os.RemoveAll(dir)
	mos, err := memosrt.Open(ctx, memosrt.Options{Dir: dir, Model: model, Engine: runtime.Options{NCtx: 1024}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mos.Close(ctx)
	var streamed strings.Builder
	res, err := mos.Generate(ctx, memosrt.Request{Prompt: "Once upon a time", NumPredict: 10,
		OnText: func(s string) error { streamed.WriteString(s); return nil }})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.TrimSpace(res.Text))
	fmt.Println(streamed.String() == res.Text, res.Usage.EvalTokens, res.DoneReason)
	// Output:
	// , there was a little girl named Lily
	// true 10 length
}

// The tier scheduler: chat turns that retrieve a memory heat it (MemoryOS's
// heat: visits, interactions, recency); a tick promotes it into the
// activation tier, where the cube's next prompts restore it.
func ExampleOS_Tick() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "memosrt-example")
	defer os.RemoveAll(dir)
	mos, err := memosrt.Open(ctx, memosrt.Options{Dir: dir, Model: model, Engine: runtime.Options{NCtx: 1024}, NoScheduler: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mos.Close(ctx)
	dog, _ := mos.AddMemory(ctx, "lily", textmem.Memory{Text: "Lily has a dog named Max."})
	mos.AddMemory(ctx, "lily", textmem.Memory{Text: "Tom likes red apples."})
	turn := []memosrt.Message{{Role: "user", Content: "Where does the dog Max run?"}}
	for range 3 {
		mos.Chat(ctx, memosrt.Request{Cube: "lily", Messages: turn, NumPredict: 4})
	}
	rep, err := mos.Tick(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	st, _ := mos.Tiers(ctx, "lily", 0)
	for _, m := range st.Memories {
		if m.ID == dog.ID {
			fmt.Println("promoted:", rep.Done, "tier:", m.Tier)
		}
	}
	res, _ := mos.Chat(ctx, memosrt.Request{Cube: "lily", Messages: turn, NumPredict: 4, NoPersist: true})
	fmt.Println("pack memories:", res.PackMemories, "cached >= pack:", res.Usage.CachedTokens >= st.PackTokens)
	// Output:
	// promoted: 1 tier: activation
	// pack memories: 1 cached >= pack: true
}

// Several cubes in one chat: the user's cube (written: the turn is recorded
// there) and shared cubes that are only read, their packs first in the
// prompt (warmed here; alice's memory is retrieved). The response counts
// the memories it carried per cube.
func ExampleOS_Chat_cubes() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "memosrt-example")
	defer os.RemoveAll(dir)
	mos, err := memosrt.Open(ctx, memosrt.Options{Dir: dir, Model: model, Engine: runtime.Options{NCtx: 1024}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mos.Close(ctx)
	if _, err := mos.CreateCube(ctx, memosrt.Cube{Name: "assistant-x", Assistant: true}); err != nil {
		fmt.Println(err)
		return
	}
	for cube, m := range map[string]string{"alice": "Alice likes green tea.", "shop": "The tea shop opens at nine.", "assistant-x": "Answer with short stories."} {
		if _, err := mos.AddMemory(ctx, cube, textmem.Memory{Text: m}); err != nil {
			fmt.Println(err)
			return
		}
	}
	for _, c := range []string{"shop", "assistant-x"} { // into their packs: the shared prefix
		if _, err := mos.Warm(ctx, c, memosrt.WarmOptions{}); err != nil {
			fmt.Println(err)
			return
		}
	}
	res, err := mos.Chat(ctx, memosrt.Request{Cube: "alice", ReadCubes: []string{"shop", "assistant-x"}, NumPredict: 8,
		Messages: []memosrt.Message{{Role: "user", Content: "When does the tea shop open?"}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.CubeMemories["alice"], res.CubeMemories["shop"], res.CubeMemories["assistant-x"])
	// Output:
	// 1 1 1
}
