//go:build !race

package badger

// raceBuild is true under the race detector (go test -race).
const raceBuild = false
