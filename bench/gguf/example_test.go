package gguf_test

import (
	"context"
	"fmt"
	"log"

	"github.com/memosrt/memosrt/bench/gguf"
)

// Write the 1B shape with the Llama 2 tokenizer of a small model.
func ExampleWrite() {
	err := gguf.Write(context.Background(), "models/random-1b.gguf", gguf.Presets["1b"], "models/llama-2-tiny-random.gguf", 1)
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleSpec_NParams() {
	for _, name := range []string{"tiny", "1b", "8b"} {
		s := gguf.Presets[name]
		fmt.Printf("%s: %d weights, %.2f GB in f16\n", name, s.NParams(), float64(2*s.NParams())/1e9)
	}
	// Output:
	// tiny: 4170048 weights, 0.01 GB in f16
	// 1b: 1104218112 weights, 2.21 GB in f16
	// 8b: 7241732096 weights, 14.48 GB in f16
}
