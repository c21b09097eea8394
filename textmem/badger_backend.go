package textmem

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
)

// keyRecord is the key prefix of cube registry records in the Badger
// database: srv/cube/<name> (the prefix predates this package's Backend).
const keyRecord = "srv/cube/"

// badgerBackend keeps cube c's key k at "t/<c>/<k>" (cube names cannot
// contain '/', so cube "a"'s keys never share a prefix with cube "ab"'s).
// Every write goes through datadir.DB.Update or Write, which ask Room
// first and refuse it with datadir.ErrNoSpace when the disk is too full to
// take it safely; the write batches (Bulk, the prefix deletes) ask Room
// themselves.
type badgerBackend struct {
	db *datadir.DB
}

// NewBadgerBackend returns the Backend over the embedded database db, the
// default of Open. db stays the caller's to close.
func NewBadgerBackend(db *datadir.DB) Backend { return badgerBackend{db: db} }

// bulkRoomBytes is how many bytes Bulk puts between two free-space checks.
const bulkRoomBytes = 256 << 10

func cubeKeyPrefix(cube string) []byte { return []byte("t/" + cube + "/") }

// metaSummed is the Badger UserMeta bit of a record whose value ends with
// a checksum: the 4-byte big-endian CRC-32C (Castagnoli) of the record's
// full Badger key followed by the value before it. Records written
// before it existed have no such bit and are read as they are.
const metaSummed = 0x01

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// seal returns value followed by the checksum of key and value.
func seal(key, value []byte) []byte {
	c := crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, value)
	return binary.BigEndian.AppendUint32(append(make([]byte, 0, len(value)+4), value...), c)
}

// unseal returns the value of a record read from Badger: without its
// checksum when it has one, or an error wrapping ErrDamaged naming the key
// when the checksum does not match, or when Badger's read failed (see
// datadir.CheckValue). v is Badger's buffer; the result aliases it.
func unseal(item *bg.Item, v []byte) ([]byte, error) {
	if err := datadir.CheckValue(item, v); err != nil {
		return nil, fmt.Errorf("%w: record %s: %w", ErrDamaged, item.Key(), err)
	}
	if item.UserMeta()&metaSummed == 0 {
		return v, nil
	}
	if len(v) < 4 {
		return nil, fmt.Errorf("%w: record %s: %d bytes, shorter than its checksum", ErrDamaged, item.Key(), len(v))
	}
	body := v[:len(v)-4]
	want := binary.BigEndian.Uint32(v[len(v)-4:])
	if got := crc32.Update(crc32.Checksum(item.Key(), castagnoli), castagnoli, body); got != want {
		return nil, fmt.Errorf("%w: record %s: checksum %08x, stored %08x", ErrDamaged, item.Key(), got, want)
	}
	return body, nil
}

type badgerTxn struct {
	txn *bg.Txn
	pre []byte
}

func (t badgerTxn) key(k []byte) []byte {
	return append(append(make([]byte, 0, len(t.pre)+len(k)), t.pre...), k...)
}

func (t badgerTxn) Get(k []byte) ([]byte, error) {
	item, err := t.txn.Get(t.key(k))
	if errors.Is(err, bg.ErrKeyNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, damaged(err, t.key(k))
	}
	v, err := item.ValueCopy(nil)
	if err != nil {
		return nil, damaged(err, t.key(k))
	}
	return unseal(item, v)
}

// damaged wraps err with ErrDamaged naming key when err is a read of
// damaged bytes (datadir.Damaged); other errors are returned as they are.
func damaged(err error, key []byte) error {
	if datadir.Damaged(err) && !errors.Is(err, ErrDamaged) {
		return fmt.Errorf("%w: record %s: %w", ErrDamaged, key, err)
	}
	return err
}

func (t badgerTxn) Set(k, v []byte) error {
	key := t.key(k)
	err := t.txn.SetEntry(bg.NewEntry(key, seal(key, v)).WithMeta(metaSummed))
	if errors.Is(err, bg.ErrTxnTooBig) {
		return fmt.Errorf("%w: %v", ErrTxnTooBig, err)
	}
	return err
}

func (t badgerTxn) Delete(k []byte) error {
	err := t.txn.Delete(t.key(k))
	if errors.Is(err, bg.ErrTxnTooBig) {
		return fmt.Errorf("%w: %v", ErrTxnTooBig, err)
	}
	return err
}

func (t badgerTxn) Iterate(prefix []byte, keysOnly bool, fn func(k, v []byte) error) error {
	pre := t.key(prefix)
	// No prefetch: index values are small and inline in the LSM tree, and
	// prefetching copies each one (twice the load time of a large cube).
	it := t.txn.NewIterator(bg.IteratorOptions{Prefix: pre})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		k := item.Key()[len(t.pre):] // Badger's buffer: valid until Next
		var err error
		if keysOnly {
			err = fn(k, nil)
		} else {
			err = item.Value(func(v []byte) error {
				v, err := unseal(item, v)
				if err != nil {
					return err
				}
				return fn(k, v)
			})
			err = damaged(err, item.Key())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (b badgerBackend) View(ctx context.Context, cube string, fn func(Txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.db.View(func(txn *bg.Txn) error { return fn(badgerTxn{txn: txn, pre: cubeKeyPrefix(cube)}) })
}

func (b badgerBackend) Update(ctx context.Context, cube string, fn func(Txn) error) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := b.db.Update(func(txn *bg.Txn) error { return fn(badgerTxn{txn: txn, pre: cubeKeyPrefix(cube)}) })
		if errors.Is(err, bg.ErrConflict) {
			continue
		}
		if errors.Is(err, bg.ErrTxnTooBig) && !errors.Is(err, ErrTxnTooBig) {
			err = fmt.Errorf("%w: %v", ErrTxnTooBig, err)
		}
		return err
	}
}

func (b badgerBackend) Bulk(ctx context.Context, cube string, fn func(put func(k, v []byte) error) error) error {
	if err := b.db.Room(0); err != nil {
		return err
	}
	wb := b.db.Badger().NewWriteBatch()
	defer wb.Cancel()
	pre := cubeKeyPrefix(cube)
	var unchecked int64 // bytes put since the last free-space check
	err := fn(func(k, v []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if unchecked += int64(len(k) + len(v)); unchecked >= bulkRoomBytes {
			if err := b.db.Room(unchecked); err != nil {
				return err
			}
			unchecked = 0
		}
		key := append(append([]byte(nil), pre...), k...)
		return wb.SetEntry(bg.NewEntry(key, seal(key, v)).WithMeta(metaSummed))
	})
	if err != nil {
		return err
	}
	return wb.Flush()
}

func (b badgerBackend) DeletePrefix(ctx context.Context, cube string, prefix []byte) error {
	pre := append(cubeKeyPrefix(cube), prefix...)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var keys [][]byte
		err := b.db.View(func(txn *bg.Txn) error {
			it := txn.NewIterator(bg.IteratorOptions{Prefix: pre})
			defer it.Close()
			for it.Rewind(); it.Valid() && len(keys) < 10000; it.Next() {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			return nil
		}
		if err := b.db.Room(0); err != nil {
			return err
		}
		wb := b.db.Badger().NewWriteBatch()
		for _, k := range keys {
			if err := wb.Delete(k); err != nil {
				wb.Cancel()
				return err
			}
		}
		if err := wb.Flush(); err != nil {
			return err
		}
	}
}

func (b badgerBackend) Cubes(ctx context.Context, prefix []byte) ([]string, error) {
	var out []string
	err := b.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte("t/")})
		defer it.Close()
		for it.Rewind(); it.Valid(); {
			if err := ctx.Err(); err != nil {
				return err
			}
			k := it.Item().Key()[2:]
			slash := bytes.IndexByte(k, '/')
			if slash <= 0 {
				it.Next()
				continue
			}
			cube := string(k[:slash])
			want := append(cubeKeyPrefix(cube), prefix...)
			it.Seek(want)
			if it.Valid() && bytes.HasPrefix(it.Item().Key(), want) && ValidCube(cube) {
				out = append(out, cube)
			}
			// '0' is the byte after '/': the first key past "t/<cube>/...".
			it.Seek([]byte("t/" + cube + "0"))
		}
		return nil
	})
	return out, err
}

func (b badgerBackend) Record(ctx context.Context, cube string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var v []byte
	err := b.db.View(func(txn *bg.Txn) error {
		item, err := txn.Get([]byte(keyRecord + cube))
		if errors.Is(err, bg.ErrKeyNotFound) {
			return ErrNoRecord
		}
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	return v, err
}

func (b badgerBackend) CreateRecord(ctx context.Context, cube string, rec []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// an existing record is ErrRecordExists, also on a full disk
	err := b.db.View(func(txn *bg.Txn) error {
		_, err := txn.Get([]byte(keyRecord + cube))
		return err
	})
	if err == nil {
		return ErrRecordExists
	}
	if !errors.Is(err, bg.ErrKeyNotFound) {
		return err
	}
	for {
		err := b.db.Write(int64(len(rec)), func(txn *bg.Txn) error {
			if _, err := txn.Get([]byte(keyRecord + cube)); err == nil {
				return ErrRecordExists
			} else if !errors.Is(err, bg.ErrKeyNotFound) {
				return err
			}
			return txn.Set([]byte(keyRecord+cube), rec)
		})
		if !errors.Is(err, bg.ErrConflict) {
			return err
		}
	}
}

func (b badgerBackend) Records(ctx context.Context) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := b.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(keyRecord), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			out[string(it.Item().Key()[len(keyRecord):])] = v
		}
		return nil
	})
	return out, err
}

func (b badgerBackend) DeleteRecord(ctx context.Context, cube string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.db.Update(func(txn *bg.Txn) error { return txn.Delete([]byte(keyRecord + cube)) })
}

func (b badgerBackend) MaxKey(cube string) int { return badgerMaxKey - len(cubeKeyPrefix(cube)) }
