package ratelimit

import "time"

// Unit is a rate-limit unit, as envoyproxy/ratelimit names them
// (policy.Unit is this type).
type Unit string

// The units. Their lengths are envoyproxy/ratelimit's: windows of that many
// seconds aligned on Unix time.
const (
	Second Unit = "second"
	Minute Unit = "minute"
	Hour   Unit = "hour"
	Day    Unit = "day"
	Week   Unit = "week"  // 7 days
	Month  Unit = "month" // 30 days
	Year   Unit = "year"  // 365 days
)

// Duration is the unit's length; 0 for an unknown unit.
func (u Unit) Duration() time.Duration {
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	case Year:
		return 365 * 24 * time.Hour
	}
	return 0
}

// Algorithm names a limit's strategy (policy.Algorithm is this type, and
// holds the names).
type Algorithm string

// Mode is how a descriptor's limits are enforced (policy.Mode is this type,
// and holds the names).
type Mode string
