//go:build race

package testenv

// Race is true in a test binary built with -race.
const Race = true
