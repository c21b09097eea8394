package textmem_test

import (
	"context"

	"github.com/memosrt/memosrt/textmem"
	"github.com/memosrt/memosrt/textmem/postgres"
)

func init() {
	textmem.OpenPostgres = func(ctx context.Context, url string, o textmem.PostgresOptions) (textmem.Postgres, error) {
		s, err := postgres.Open(ctx, url, postgres.Options{Key: o.Key, Timeout: o.Timeout})
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return s, nil
	}
	textmem.ErrWrongKey = postgres.ErrWrongKey
}
