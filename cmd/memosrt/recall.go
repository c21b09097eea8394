package main

import (
	"context"
	"errors"
)

func benchRecall(ctx context.Context, args []string) error {
	return errors.New("bench recall: not built yet")
}
