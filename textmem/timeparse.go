package textmem

import (
	"fmt"
	"strings"
	"time"
)

// eventLayouts are the layouts ParseEventTime accepts, most specific first.
var eventLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05Z0700",
	"2006-01-02 15:04:05Z07:00",
	"2006-01-02 15:04:05 -0700",
	"2006-01-02 15:04Z07:00",
	"2006-01-02T15:04:05",
	"2006-01-02 15:04:05",
	"2006-01-02T15:04",
	"2006-01-02 15:04",
	"2006-01-02",
	"3:04 pm on 2 January, 2006", // LoCoMo session dates
}

// ParseEventTime parses an event time as given by a user or a data set and
// returns it in UTC. A time with an offset or zone ("2023-05-08T13:56:00+02:00",
// "...Z") is converted from that offset; one without (a bare date
// "2023-05-08", or "2023-05-08 13:56") is read in loc (UTC when loc is
// nil). Accepted: RFC 3339, "YYYY-MM-DD[ T]hh:mm[:ss][offset]", "YYYY-MM-DD"
// and LoCoMo's "1:56 pm on 8 May, 2023".
func ParseEventTime(s string, loc *time.Location) (time.Time, error) {
	if loc == nil {
		loc = time.UTC
	}
	s = strings.TrimSpace(s)
	for _, l := range eventLayouts {
		if t, err := time.ParseInLocation(l, s, loc); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("textmem: event time %q: not RFC 3339, YYYY-MM-DD[ hh:mm[:ss]] or LoCoMo form", s)
}
