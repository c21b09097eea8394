package server

import "testing"

func TestSameModel(t *testing.T) {
	for _, c := range []struct {
		name, want string
		same       bool
	}{
		{"stories260K", "stories260K", true},
		{"stories260K:latest", "stories260K", true},
		{"stories", "stories:latest", true},
		{"stories:latest", "stories:latest", true},
		{"library/stories", "stories:latest", true},
		{"registry.ollama.ai/library/stories:latest", "stories:latest", true},
		{"Stories:Latest", "stories:latest", true},
		{"llama3.2:1b", "llama3.2:1b", true},
		{"llama3.2", "llama3.2:1b", false},
		{"stories:1b", "stories:latest", false},
		{"user/stories", "stories:latest", false},
		{"other", "stories:latest", false},
		{"my model.gguf", "my model", false},
	} {
		t.Run(c.name+"~"+c.want, func(t *testing.T) {
			if got := sameModel(c.name, c.want); got != c.same {
				t.Errorf("sameModel(%q, %q) = %v, want %v", c.name, c.want, got, c.same)
			}
		})
	}
}
