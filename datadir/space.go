package datadir

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/memosrt/memosrt/errkind"
)

// ErrNoSpace is returned by Room (and so by every write of the owner
// packages that calls it first) when the filesystem of the data directory
// lacks the space that the write and Badger's own file writes after it may
// take, and by Open when it lacks the space that opening writes. The
// wrapping message names the directory, the free bytes and the bytes
// needed. Nothing of the refused write is stored; reads go on. HTTP 507.
var ErrNoSpace = errkind.New(errkind.NoSpace, "badger: not enough free disk space")

// Why a reserve: Badger v4.9.6 writes its memtable log (*.mem, created at
// 2*MemTableSize by z.OpenMmapFile), its value log (*.vlog, created at
// 2*ValueLogFileSize) and every new table (*.sst, table.CreateTable) through
// writable mmaps of files truncated to their full length: sparse files whose
// pages get their disk blocks on first write. On a full filesystem that
// first write is a SIGBUS (logFile.zeroNextEntry, table builder copy), which
// kills the process. A write through a mapping cannot return ENOSPC, so the
// space those writes will take has to be free before a commit is let in.

const (
	// spaceMargin is the slack above the computed need, bytes: it absorbs
	// the small commits that do not call Room (Badger's own sequence
	// leases, one-line state records) and the page rounding of new files.
	spaceMargin = 1 << 20
	// minFileSize is the smallest memtable and value-log file size Open
	// picks for a small filesystem, bytes; Badger refuses value-log files
	// under 1 MiB (db.go checkAndSetOptions).
	minFileSize = 1 << 20
	// defaultMemTableSize and defaultValueLogFileSize are the sizes on a
	// filesystem of at least 256 MiB and 512 MiB, bytes. The memtable sets
	// the largest transaction (15%: 1.2 MiB, 13,107 entries), which must
	// hold a memory of textmem's MaxTextBytes (64 KiB) with an index entry
	// per distinct term (10,948 in TestLargeText; 4 MiB fits 6,553), and
	// the heap of table builds: Badger pools up to eight arenas of twice
	// the memtable (TestCompactionHeap). The value-log file is the unit
	// GC rewrites: the value log holds up to four files beyond its live
	// values and their stale share (docs/data-directory.md, "Disk and
	// memory bounds"), so a smaller file is less slack and more passes.
	defaultMemTableSize     = 8 << 20
	defaultValueLogFileSize = 32 << 20
)

// fileSizes picks the memtable and value-log file sizes for a filesystem
// of total bytes: 1/32 and 1/16 of it rounded down to a power of two,
// within [1 MiB, 8 MiB] and [1 MiB, 32 MiB]. On a small filesystem the
// default sizes alone would exceed the reserve that Room keeps free (two
// 32 MiB value-log files do not fit 20 MiB), so every write would be
// refused. total 0 (unknown) gives the defaults.
func fileSizes(total int64) (mem, vlog int64) {
	if total <= 0 {
		return defaultMemTableSize, defaultValueLogFileSize
	}
	return clampPow2(total/32, minFileSize, defaultMemTableSize), clampPow2(total/16, minFileSize, defaultValueLogFileSize)
}

// clampPow2 is the largest power of two <= n, within [lo, hi].
func clampPow2(n, lo, hi int64) int64 {
	p := lo
	for p*2 <= n && p*2 <= hi {
		p *= 2
	}
	return p
}

// dirFiles is what Room reads of the data directory's files: allocated
// bytes (st_blocks*512) of the newest memtable log, of the newest value-log
// file and the sum over the tables and over all memtable logs.
type dirFiles struct {
	newestMem, newestVlog   int64 // allocated bytes; -1 when there is none
	sstBytes, memBytes      int64 // allocated bytes summed over *.sst and *.mem
	newestMemID, newestVlID int   // file numbers, for messages and tests
}

func readDirFiles(dir string) (dirFiles, error) {
	f := dirFiles{newestMem: -1, newestVlog: -1, newestMemID: -1, newestVlID: -1}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return f, err
	}
	for _, e := range ents {
		name := e.Name()
		ext := filepath.Ext(name)
		if ext != ".mem" && ext != ".vlog" && ext != ".sst" {
			continue
		}
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue // removed meanwhile (a flushed memtable, a rewritten value log)
		}
		a := allocated(fi)
		var id int
		if _, err := fmt.Sscanf(strings.TrimSuffix(name, ext), "%d", &id); err != nil {
			id = -1
		}
		switch ext {
		case ".sst":
			f.sstBytes += a
		case ".mem":
			f.memBytes += a
			if id > f.newestMemID {
				f.newestMemID, f.newestMem = id, a
			}
		case ".vlog":
			if id > f.newestVlID {
				f.newestVlID, f.newestVlog = id, a
			}
		}
	}
	return f, nil
}

// need is the free space, bytes, that must exist before a commit of n bytes
// is let in, so that neither it nor the Badger file writes that may follow
// it without another check can meet an unallocated page on a full disk:
//
//	the unwritten rest of the newest memtable log, up to MemTableSize plus
//	  one batch (Badger flushes a memtable once it holds MemTableSize, and a
//	  batch is at most 15% of it: db.go maxBatchSize)
//	+ the unwritten rest of the newest value-log file, up to ValueLogFileSize
//	+ one fresh memtable log and one fresh value-log file (the commit may
//	  fill the current ones, and Badger then opens new ones)
//	+ MemTableSize for the table that flushing a full memtable writes
//	+ the tables' size, for a compaction's output (written before its
//	  inputs are deleted; Flatten rewrites every table)
//	+ n + spaceMargin
func (d *DB) need(f dirFiles, n int64) int64 {
	batch := d.memSize * 15 / 100
	restMem := d.memSize + batch
	if f.newestMem >= 0 {
		restMem = max(0, restMem-f.newestMem)
	}
	restVlog := d.vlogSize
	if f.newestVlog >= 0 {
		restVlog = max(0, restVlog-f.newestVlog)
	}
	fresh := d.memSize + batch + d.vlogSize
	return restMem + restVlog + fresh + d.memSize + f.sstBytes + max(n, 0) + spaceMargin
}

// Room reports whether a commit of n bytes (its keys and values; 0 when
// small or unknown) may be written now: nil when the filesystem's free
// space covers need (see the formula there), else an error wrapping
// ErrNoSpace that names the directory, the free bytes and the bytes
// needed. The owner packages call it before every commit they make, and
// GC and Reclaim before they rewrite. It reads the directory (one
// readdir, one stat per table and log file) and one statfs; it holds no
// lock, so commits racing past it together share spaceMargin. Always nil
// in memory and where free space cannot be read (non-unix).
func (d *DB) Room(n int64) error {
	if d == nil || d.dir == "" {
		return nil
	}
	if d.db == nil || d.db.IsClosed() {
		return ErrClosed
	}
	free, _, ok := diskSpace(d.dir)
	if !ok {
		return nil
	}
	f, err := readDirFiles(d.dir)
	if err != nil {
		return fmt.Errorf("badger: %w", err)
	}
	if need := d.need(f, n); free < need {
		d.refused.Add(1)
		return noSpace("in", d.dir, free, need)
	}
	return nil
}

// Refused is how many times Room refused a write since Open (the
// background rewrites of GC and Reclaim among them).
func (d *DB) Refused() int64 { return d.refused.Load() }

// openNeed is the free space, bytes, that Open needs: the tables that
// flushing the memtable logs left by the last run writes (at most their
// size); the output of the compaction Badger starts as soon as it opens
// (level 0 holds a table after every Close, and memosrt compacts at one
// table: NumLevelZeroTables), written before its inputs are deleted, at
// most the tables' size plus the flushed ones; plus spaceMargin for the
// headers of the new memtable and value-log files Badger creates at open
// and the first small records. It is never more than Room's need for a
// write, so a directory that took its last write opens again. Read-only,
// Badger runs no compaction: the memtable logs and spaceMargin.
func openNeed(dir string, readOnly bool) (int64, error) {
	f, err := readDirFiles(dir)
	if err != nil {
		return 0, err
	}
	if readOnly {
		return f.memBytes + spaceMargin, nil
	}
	return 2*f.memBytes + f.sstBytes + spaceMargin, nil
}

// noSpace is ErrNoSpace for a write ("in") or for Open ("to open").
func noSpace(in, dir string, free, need int64) error {
	return fmt.Errorf("%w %s %s: %s free, %s needed", ErrNoSpace, in, dir, mib(free), mib(need))
}

// mib formats bytes as MiB with one decimal and the exact byte count.
func mib(n int64) string {
	return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
}
