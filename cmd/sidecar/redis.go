package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// newRedisClient builds the client --redis-url describes: one server, a
// Sentinel-managed primary (master_name=…), or a Cluster (redis+cluster://,
// or several addr=). Pipelines are never retried by the client — a retry
// after a lost reply could apply a check twice — and a refused dial is not
// retried either (go-redis would try five times, 100ms apart), so a dead
// Redis answers at once and on_store_error decides within the store timeout.
func newRedisClient(raw string, timeout time.Duration) (redis.UniversalClient, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error quotes the whole URL, password included.
		return nil, fmt.Errorf("--redis-url is not a valid URL (not shown: it may hold a password); want e.g. redis://:PASSWORD@host:6379/0")
	}
	cluster := false
	switch u.Scheme {
	case "redis", "rediss":
	case "redis+cluster", "rediss+cluster":
		cluster = true
		u.Scheme = strings.TrimSuffix(u.Scheme, "+cluster")
	default:
		return nil, fmt.Errorf("--redis-url %s: scheme %q: want redis://, rediss:// (TLS) or redis+cluster://", Redact(raw), u.Scheme)
	}
	q := u.Query()
	dial := max(timeout, 200*time.Millisecond)
	io := max(2*timeout, 500*time.Millisecond)
	switch {
	case q.Get("master_name") != "":
		o, err := redis.ParseFailoverURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("--redis-url %s (sentinel): %v", Redact(raw), redactErr(err, raw))
		}
		o.MaxRetries, o.DialerRetries = -1, 1
		defaultTimeouts(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, dial, io)
		return redis.NewFailoverClient(o), nil
	case cluster || len(q["addr"]) > 0:
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("--redis-url %s (cluster): %v", Redact(raw), redactErr(err, raw))
		}
		o.MaxRetries, o.DialerRetries = -1, 1
		defaultTimeouts(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, dial, io)
		return redis.NewClusterClient(o), nil
	}
	o, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("--redis-url %s: %v", Redact(raw), redactErr(err, raw))
	}
	o.MaxRetries, o.DialerRetries = -1, 1
	defaultTimeouts(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, dial, io)
	return redis.NewClient(o), nil
}

func defaultTimeouts(dial, read, write *time.Duration, d, io time.Duration) {
	if *dial == 0 {
		*dial = d
	}
	if *read == 0 {
		*read = io
	}
	if *write == 0 {
		*write = io
	}
}

// Redact returns a URL with its password replaced, for logs and errors.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// redactErr keeps a parse error from echoing a password.
func redactErr(err error, raw string) error {
	u, perr := url.Parse(raw)
	if perr != nil || u.User == nil {
		return err
	}
	if pw, ok := u.User.Password(); ok && pw != "" {
		return fmt.Errorf("%s", strings.ReplaceAll(err.Error(), pw, "xxxxx"))
	}
	return err
}

// slogRedis routes go-redis's own log lines (dial failures and the like)
// into the sidecar's logger, so --log-format json stays JSON.
type slogRedis struct{ log *slog.Logger }

func (l slogRedis) Printf(ctx context.Context, format string, v ...any) {
	l.log.Warn("redis client", "detail", fmt.Sprintf(format, v...))
}
