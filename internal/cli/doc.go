// Package cli holds the command-line conventions every memosrt command
// shares, over cobra and pflag: the usage template (one usage line; the
// environment table on the root command), group commands that only hold
// subcommands (Group, SubcommandArgs: an unknown or missing subcommand is
// an error with suggestions, never the help), positional-argument checks
// (NoArgs, ExactArgs), flag parse errors in the user's words (FlagError),
// the load-progress line on a terminal (Progress, IsTerminal), and what
// commands print: errors without our package prefixes (UserMessage),
// byte sizes, JSON, table cells; a flag's list of numbers (ParseInts).
//
// It reads no flag value and no environment variable: cmd/memosrt does,
// and passes its environment table to UsageTemplate. Its functions keep no
// state and are safe for concurrent use.
package cli
