package cli

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/spf13/cobra"
)

func TestUserMessage(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"kvcache: pack: not found", "pack: not found"},
		{"memosrt: textmem: cube \"a\": memosrt: closed", "cube \"a\": closed"},
		{"open x: open x: no such file", "open x: no such file"},
		{"memosrt", "memosrt"},
	} {
		if got := UserMessage(errors.New(c.in)); got != c.want {
			t.Errorf("UserMessage(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestParseInts(t *testing.T) {
	got, err := ParseInts(" 512, 1024,,4096 ")
	if err != nil || !slices.Equal(got, []int{512, 1024, 4096}) {
		t.Fatalf("ParseInts = %v, %v", got, err)
	}
	for _, bad := range []string{"", ",", "1,x", "0", "-3"} {
		if _, err := ParseInts(bad); err == nil {
			t.Errorf("ParseInts(%q): no error", bad)
		}
	}
}

func TestBytesOneLine(t *testing.T) {
	for n, want := range map[int64]string{512: "512 B", 3 << 10: "3.0 KiB", 12 << 20: "12.00 MiB", 3 << 29: "1.50 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
	if got := OneLine("a\n  b\tc", 10); got != "a b c" {
		t.Errorf("OneLine = %q", got)
	}
	if got := OneLine("abcdefghij", 5); got != "abcd…" {
		t.Errorf("OneLine cut = %q", got)
	}
}

func TestArgsAndGroups(t *testing.T) {
	root := &cobra.Command{Use: "memosrt"}
	add := &cobra.Command{Use: "add", Args: ExactArgs(1, "one TEXT argument"), RunE: func(*cobra.Command, []string) error { return nil }}
	ls := &cobra.Command{Use: "ls", Args: NoArgs, RunE: func(*cobra.Command, []string) error { return nil }}
	root.AddCommand(Group("mem", "memories", add, ls))
	root.SilenceErrors, root.SilenceUsage = true, true
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mem", "add"}, "mem add takes one TEXT argument"},
		{[]string{"mem", "ls", "x"}, `mem ls takes no arguments, got ["x"]`},
		{[]string{"mem"}, "mem needs a command: add, ls (memosrt mem --help)"},
		{[]string{"mem", "lss"}, `unknown mem command "lss" (add, ls); did you mean ls?`},
		{[]string{"mem", "add", "hello"}, "<nil>"},
	} {
		root.SetArgs(c.args)
		if got := fmt.Sprint(root.Execute()); got != c.want {
			t.Errorf("%q: %s, want %s", c.args, got, c.want)
		}
	}
}
