package datadir

import (
	"fmt"
	"testing"

	bg "github.com/dgraph-io/badger/v4"
)

// BenchmarkReadVerify reads every value of a directory holding 50,000
// records of 200 bytes (LSM tree) and 16 values of 1.25 MiB (value log),
// reopened with Badger's checksum verification on (value checksums, SST
// blocks on read: Open's default) and off (NoVerify), to measure its cost
// (docs/benchmarks.md). Each run reads from a fresh open (cold block cache).
func BenchmarkReadVerify(b *testing.B) {
	dir := b.TempDir()
	d, err := Open(Options{Dir: dir, NoSync: true, NoCompactOnOpen: true})
	if err != nil {
		b.Fatal(err)
	}
	small := make([]byte, 200)
	for i := range small {
		small[i] = byte(i * 7)
	}
	wb := d.Badger().NewWriteBatch()
	for i := range 50000 {
		if err := wb.Set(fmt.Appendf(nil, "t/c/m/%06d", i), small); err != nil {
			b.Fatal(err)
		}
	}
	big := make([]byte, MaxValueThreshold+256<<10)
	for i := range 16 {
		if err := wb.Set(fmt.Appendf(nil, "k/b/%02d", i), big); err != nil {
			b.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := d.Close(); err != nil {
		b.Fatal(err)
	}
	for _, verify := range []bool{true, false} {
		b.Run(fmt.Sprintf("verify=%v", verify), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				d, err := Open(Options{Dir: dir, NoSync: true, NoCompactOnOpen: true, NoVerify: !verify})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				n := 0
				err = d.Badger().View(func(txn *bg.Txn) error {
					it := txn.NewIterator(bg.IteratorOptions{})
					defer it.Close()
					for it.Rewind(); it.Valid(); it.Next() {
						v, err := ValueCopy(it.Item())
						if err != nil {
							return err
						}
						n += len(v)
					}
					return nil
				})
				b.StopTimer()
				if err != nil || n != 50000*200+16*len(big) {
					b.Fatalf("read %d bytes, %v", n, err)
				}
				d.Close()
				b.StartTimer()
			}
		})
	}
}
