//go:build race

package datadir

// raceBuild is true under the race detector (go test -race).
const raceBuild = true
