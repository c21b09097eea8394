// Command memosrt is a local-first LLM inference runtime with tiered memory.
//
//	memosrt mem add|ls|search|rm --db DIR --cube NAME ...
//	memosrt kv warm|ls --db DIR --model PATH --cube NAME
//	memosrt run --db DIR --model PATH --cube NAME [flags] PROMPT
//	memosrt mcp --db DIR [--model PATH] [--cube NAME]
//	memosrt keys create|ls|revoke|share|unshare --db DIR ...
//	memosrt backup --db DIR -o FILE | restore --db DIR FILE
//	memosrt bench ttft|recall ...
//	memosrt check --db DIR [--repair]
//	memosrt gen-model --preset 1b --out PATH
//	memosrt quantize IN.gguf OUT.gguf --type f16|q8_0|q4_0|q4_k_m|...
//	memosrt version | devices
//	memosrt completion bash|zsh|fish|powershell
//
// The command tree is github.com/spf13/cobra (as ollama's cmd/cmd.go): one
// *cobra.Command per verb, built by newRootCmd, each with its own flags.
// Environment variables are read here only and passed down; see envTable.
package main
