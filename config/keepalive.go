package config

import (
	"strconv"
	"strings"
	"time"
)

// ParseKeepAlive reads a keep-alive (Options.KeepAlive; serve
// --keep-alive, OLLAMA_KEEP_ALIVE) as Ollama does (api.Duration,
// envconfig.KeepAlive): a Go duration or a number of seconds; negative is
// forever (-1). Errors: time.ParseDuration's for anything else.
func ParseKeepAlive(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if nerr != nil {
			return 0, err
		}
		d = time.Duration(n * float64(time.Second))
	}
	if d < 0 {
		d = -1
	}
	return d, nil
}
