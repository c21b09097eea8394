package main

import (
	"fmt"

	"github.com/memosrt/memosrt/runtime/llama"
)

func main() {
	llama.Init("")
	fmt.Println(llama.SystemInfo())
}
