// Command assistant is a memory-backed chat in its own Go module: it embeds
// memosrt (import "github.com/memosrt/memosrt"), keeps what it is told in
// a cube, and answers with those memories in the prompt; a memory used
// often moves into the cube's KV pack and later turns restore it instead
// of prefilling it.
//
//	assistant --db DIR --model stories260K.gguf --remember "Lily has a dog named Max." "Once upon a time, Lily"
//
// Each --remember adds a memory to the cube; the arguments are chat turns.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/textmem"
)

func main() {
	db := flag.String("db", "assistant-data", "data directory")
	model := flag.String("model", "", "GGUF model")
	cube := flag.String("cube", "me", "memory cube")
	n := flag.Int("n", 32, "tokens to generate per turn")
	var remember []string
	flag.Func("remember", "a memory to add to the cube (repeatable)", func(s string) error {
		remember = append(remember, s)
		return nil
	})
	flag.Parse()
	if err := run(context.Background(), *db, *model, *cube, *n, remember, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "assistant:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, db, model, cube string, n int, memories, turns []string) error {
	if model == "" {
		return fmt.Errorf("--model is required (a GGUF file)")
	}
	mos, err := memosrt.Open(ctx, memosrt.Options{Dir: db, Model: model, Parallel: 1,
		Engine: runtime.Options{NCtx: 1024, Threads: 2}})
	if err != nil {
		return err
	}
	defer mos.Close(ctx)
	for _, m := range memories {
		if _, err := mos.AddMemory(ctx, cube, textmem.Memory{Text: m}); err != nil {
			return err
		}
	}
	var conv []memosrt.Message
	for _, t := range turns {
		conv = append(conv, memosrt.Message{Role: "user", Content: t})
		res, err := mos.Chat(ctx, memosrt.Request{Cube: cube, Messages: conv, NumPredict: n})
		if err != nil {
			return err
		}
		conv = append(conv, memosrt.Message{Role: "assistant", Content: res.Text})
		u := res.Usage
		fmt.Printf("> %s\n%s\n[%d prompt tokens, %d cached (%s), %d memories in the pack, %d retrieved, TTFT %.1f ms]\n",
			t, res.Text, u.PromptTokens, u.CachedTokens, orNone(res.CacheSource), res.PackMemories, res.Retrieved, float64(u.TTFT.Microseconds())/1e3)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
