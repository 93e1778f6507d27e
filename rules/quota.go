package rules

import (
	"strings"
	"time"

	"github.com/edgerate/edge/internal/algorithm"
)

// compileCalendar compiles reset and timezone, which only a quota has,
// into r, and refuses period on a quota, which resets by the calendar
// instead. It reports whether r counts by period (every algorithm but
// quota), which the caller then checks.
func compileCalendar(p *problems, path string, rc RuleConfig) (r calendarRule, byPeriod bool) {
	if rc.Algorithm != algorithm.Quota.String() {
		if rc.Reset != "" {
			p.add(path+".reset", "applies only to algorithm quota, got %q with %s", rc.Reset, algorithmOrDefault(rc.Algorithm))
		}
		if rc.Timezone != "" {
			p.add(path+".timezone", "applies only to algorithm quota, got %q with %s", rc.Timezone, algorithmOrDefault(rc.Algorithm))
		}
		return r, true
	}
	if rc.Period != 0 {
		p.add(path+".period", "does not apply to algorithm quota, which resets by reset (daily, weekly or monthly), got %s", fmtDuration(rc.Period))
	}
	if rc.Reset == "" {
		p.missing(path+".reset", "with algorithm quota", "must be daily, weekly or monthly, got \"\"")
	} else {
		r.reset = parseAt(p, path+".reset", rc.Reset, algorithm.ParseReset)
	}
	r.location = time.UTC
	switch tz := rc.Timezone; {
	case tz == "":
	case tz == "Local" || strings.HasPrefix(tz, "/") || strings.Contains(tz, ".."):
		// LoadLocation reads "Local" as the machine's zone: a config must
		// mean the same wherever it runs.
		p.add(path+".timezone", "must be an IANA time zone name such as Europe/Berlin, got %q", tz)
	default:
		loc, err := time.LoadLocation(tz)
		if err != nil {
			p.add(path+".timezone", "unknown time zone %q", tz)
			break
		}
		r.location = loc
	}
	return r, false
}

// calendarRule is what compileCalendar compiles.
type calendarRule struct {
	reset    algorithm.Reset
	location *time.Location
}

// algorithmOrDefault is a configured algorithm's name for a message.
func algorithmOrDefault(a string) string {
	if a == "" {
		return algorithm.SlidingWindow.String()
	}
	return a
}
