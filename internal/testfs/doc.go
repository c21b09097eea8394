// Package testfs mounts small real filesystems for tests that need a disk
// to fill (the full-disk tests of badger and server).
package testfs
