package textmem

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/memosrt/memosrt/datadir"
)

// snapBackend is a Badger backend that calls snap after each
// DeletePrefix and Bulk: the commit points of a rebuild.
type snapBackend struct {
	Backend
	snap func(stage string)
}

func (b snapBackend) DeletePrefix(ctx context.Context, cube string, prefix []byte) error {
	err := b.Backend.DeletePrefix(ctx, cube, prefix)
	b.snap("after deleting " + string(prefix))
	return err
}

func (b snapBackend) Bulk(ctx context.Context, cube string, fn func(put func(k, v []byte) error) error) error {
	err := b.Backend.Bulk(ctx, cube, fn)
	b.snap("after writing the index")
	return err
}

// A backup taken at any commit point of an index rebuild (the analyzer
// changed from plain-v1 to english-v1) restores to a cube whose searches
// find exactly what a whole index finds, whichever of the two analyzers
// the restored directory is opened with: its statistics name either the
// rebuild's analyzer (the rebuild ended) or none (rebuildMark), so a
// Store of any other analyzer rebuilds it from its texts. Before the mark,
// a Store of plain-v1 loaded the half-deleted index and found nothing.
func TestRebuildBackupRestores(t *testing.T) {
	ctx := context.Background()
	db, err := datadir.Open(datadir.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	plain, err := OpenBackend(NewBadgerBackend(db), Options{Analyzer: PlainAnalyzer{}})
	if err != nil {
		t.Fatal(err)
	}
	corpus := []string{"she was painting", "he is painting walls", "they painted the fence"}
	for _, s := range corpus {
		mustAdd(t, plain, "c", Memory{Text: s})
	}
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}
	var files, stages []string
	be := snapBackend{Backend: NewBadgerBackend(db), snap: func(stage string) {
		var buf bytes.Buffer
		if _, err := db.Backup(ctx, &buf, datadir.BackupOptions{}); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), "backup")
		if err := os.WriteFile(f, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		files, stages = append(files, f), append(stages, stage)
	}}
	english, err := OpenBackend(be, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := english.Search(ctx, "c", "paint", 5); err != nil { // loads the cube: the rebuild
		t.Fatal(err)
	}
	if err := english.Close(); err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("%d snapshots (%q), want 3: the rebuild's commit points", len(files), stages)
	}
	sorted := func(s ...string) []string { slices.Sort(s); return s }
	for i, f := range files {
		for _, tc := range []struct {
			a     Analyzer
			query string
			want  []string
		}{
			{EnglishAnalyzer{}, "paint", sorted(corpus...)},
			{PlainAnalyzer{}, "painting", sorted(corpus[0], corpus[1])},
		} {
			dir := filepath.Join(t.TempDir(), "restored")
			if _, err := datadir.RestoreBackup(ctx, f, datadir.Options{Dir: dir}); err != nil {
				t.Fatal(err)
			}
			rdb, err := datadir.Open(datadir.Options{Dir: dir, NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			s, err := OpenBackend(NewBadgerBackend(rdb), Options{Analyzer: tc.a})
			if err != nil {
				t.Fatal(err)
			}
			h, err := s.Search(ctx, "c", tc.query, 5)
			if got := sorted(texts(h)...); err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("backup %s, restored under %s: search %q finds %q (%v), want %q", stages[i], tc.a.Name(), tc.query, got, err, tc.want)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
