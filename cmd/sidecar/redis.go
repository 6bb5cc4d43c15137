package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/redact"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// newRedisClient builds the client --redis-url describes: one server, a
// Sentinel-managed primary (master_name=…), or a Cluster (redis+cluster://,
// or several addr=). Pipelines are never retried by the client — a retry
// after a lost reply could apply a check twice — and a refused dial is not
// retried either (go-redis would try five times, 100ms apart), so a dead
// Redis answers at once and on_store_error decides within the store timeout.
// Every call honours its context's deadline (ContextTimeoutEnabled; go-redis
// otherwise waits out its read timeout, at least 500ms here): a federated
// request's escrow and coordinator calls end at --federation-timeout, and
// a store's round trip at --store-timeout. With w, each new connection
// first tells w which server it reached (redisstore.Watch): a restarted or
// promoted server is counted and logged before it answers anything.
//
// With tc (a rediss:// URL and --redis-tls-*: redistls.go), every
// connection dials with it, verifying the URL's host, or, through Sentinel
// or in a Cluster, the host of the node dialed.
func newRedisClient(raw string, timeout time.Duration, w *redisstore.Watch, tc *redisTLSDialer) (redis.UniversalClient, error) {
	return redisClientFor("--redis-url", raw, timeout, w, tc)
}

// redisClientFor builds the client the URL raw, given by flag, describes
// (as newRedisClient does; errors name flag).
func redisClientFor(flag, raw string, timeout time.Duration, w *redisstore.Watch, tc *redisTLSDialer) (redis.UniversalClient, error) {
	var onConnect func(context.Context, *redis.Conn) error
	if w != nil {
		onConnect = w.OnConnect
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error quotes the whole URL, password included.
		return nil, fmt.Errorf("%s is not a valid URL (not shown: it may hold a password); want e.g. redis://:PASSWORD@host:6379/0", flag)
	}
	cluster := false
	switch u.Scheme {
	case "redis", "rediss":
	case "redis+cluster", "rediss+cluster":
		cluster = true
		u.Scheme = strings.TrimSuffix(u.Scheme, "+cluster")
	default:
		return nil, fmt.Errorf("%s %s: scheme %q: want redis://, rediss:// (TLS) or redis+cluster://", flag, Redact(raw), u.Scheme)
	}
	q := u.Query()
	dial := max(timeout, 200*time.Millisecond)
	io := max(2*timeout, 500*time.Millisecond)
	switch {
	case q.Get("master_name") != "":
		o, err := redis.ParseFailoverURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("%s %s (sentinel): %v", flag, Redact(raw), redactErr(err, raw))
		}
		o.MaxRetries, o.DialerRetries = -1, 1
		o.ContextTimeoutEnabled = true
		o.OnConnect = onConnect
		defaultTimeouts(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, dial, io)
		if tc != nil && o.TLSConfig != nil {
			o.Dialer = tc.dial("", o.DialTimeout) // each node's host
		}
		return redis.NewFailoverClient(o), nil
	case cluster || len(q["addr"]) > 0:
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("%s %s (cluster): %v", flag, Redact(raw), redactErr(err, raw))
		}
		o.MaxRetries, o.DialerRetries = -1, 1
		o.ContextTimeoutEnabled = true
		o.OnConnect = onConnect
		defaultTimeouts(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, dial, io)
		if tc != nil && o.TLSConfig != nil {
			o.Dialer = tc.dial("", o.DialTimeout) // each node's host
		}
		return redis.NewClusterClient(o), nil
	}
	o, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v", flag, Redact(raw), redactErr(err, raw))
	}
	o.MaxRetries, o.DialerRetries = -1, 1
	o.ContextTimeoutEnabled = true
	o.OnConnect = onConnect
	defaultTimeouts(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, dial, io)
	if tc != nil && o.TLSConfig != nil {
		o.Dialer = tc.dial(o.TLSConfig.ServerName, o.DialTimeout) // the URL's host
	}
	return redis.NewClient(o), nil
}

// startupCheckTimeout bounds serve's first question to Redis. It is longer
// than a probe's store timeout so that a TLS handshake with a distant Redis,
// or a walk through the sentinels, still gets its answer and a
// configuration error stops serve at start; a Redis that is down refuses the
// connection at once.
const startupCheckTimeout = 2 * time.Second

// checkRedisAtStart asks Redis whether it answers. It returns an error only
// when Redis refuses what raw describes (see redisConfigError): serve must
// not start on it. Otherwise it returns the answer for the store probe: nil,
// or why Redis is unreachable, which only makes serve not ready.
//
// upstream says the URL was made from envoyproxy/ratelimit's variables
// (REDIS_URL, REDIS_AUTH, ...): the error then names them, not a flag the
// user never wrote.
func checkRedisAtStart(ctx context.Context, p *storeProbe, raw string, upstream bool) (answer, refused error) {
	err := p.check(ctx, startupCheckTimeout)
	if hint, ok := tlsConfigError(err, upstream); ok {
		what := "--redis-url " + Redact(raw)
		if upstream {
			what = "REDIS_URL (" + Redact(raw) + ")"
		}
		return err, fmt.Errorf("%s: the TLS handshake with Redis fails (%v): %s", what, redactErr(err, raw), hint)
	}
	if hint, ok := redisConfigError(err); ok {
		var re redis.Error
		errors.As(err, &re)
		msg := strings.TrimSpace(redactErr(re, raw).Error())
		what := "--redis-url " + Redact(raw)
		if upstream {
			what = "REDIS_URL (" + Redact(raw) + ")"
			if redis.IsAuthError(err) {
				hint = "the password in REDIS_AUTH (PASSWORD, or USER:PASSWORD) is missing or wrong"
			} else {
				hint = strings.ReplaceAll(hint, "--redis-url", "REDIS_URL")
			}
		}
		return err, fmt.Errorf("%s: Redis refuses it (%s): %s", what, msg, hint)
	}
	return err, nil
}

// tlsConfigError reports whether err is a TLS handshake with Redis that
// fails for what serve was told (a certificate its CA does not sign, a name
// it does not carry, no client certificate where Redis asks for one), and
// which flag (or, upstream, which of envoyproxy/ratelimit's variables)
// fixes it. Such a handshake never succeeds by waiting: serve stops.
func tlsConfigError(err error, upstream bool) (hint string, ok bool) {
	if err == nil {
		return "", false
	}
	name := func(flag, env string) string {
		if upstream {
			return env
		}
		return flag
	}
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var alert tls.AlertError
	switch {
	case errors.As(err, &unknown):
		return "Redis's certificate is signed by a CA this process does not trust: give that CA (PEM) with " + name("--redis-tls-ca", "REDIS_TLS_CACERT"), true
	case errors.As(err, &host):
		return "Redis's certificate does not name the host dialed: dial a name it carries, or verify only its chain with " + name("--redis-tls-skip-hostname-verification", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true"), true
	case errors.As(err, &invalid):
		return "Redis's certificate is not valid (expired, not yet valid, or not for a server): renew it", true
	case errors.As(err, &alert) && (alert == 116 || alert == 42), // certificate_required, bad_certificate
		strings.Contains(err.Error(), "remote error: tls: certificate required"), strings.Contains(err.Error(), "remote error: tls: bad certificate"):
		return "Redis asks for a client certificate it accepts (tls-auth-clients): give one its CA signed with " + name("--redis-tls-cert and --redis-tls-key", "REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY"), true
	}
	return "", false
}

// warnUnusedPassword logs a warning when raw carries a password and the
// Redis it reaches has none: go-redis then connects without a word, and
// whoever set the password believes Redis is guarded when anyone who
// reaches it may use it. upstream names REDIS_AUTH, which gave the
// password, rather than --redis-url.
func warnUnusedPassword(ctx context.Context, client redis.UniversalClient, raw string, upstream bool, log *slog.Logger) {
	u, err := url.Parse(raw)
	if err != nil {
		return
	}
	pw, _ := u.User.Password()
	if pw == "" {
		pw = u.Query().Get("password")
	}
	if pw == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, startupCheckTimeout)
	defer cancel()
	args := []any{"auth", pw}
	if name := u.User.Username(); name != "" {
		args = []any{"auth", name, pw}
	}
	err = client.Do(ctx, args...).Err()
	if err == nil || !strings.Contains(err.Error(), "without any password configured") {
		return
	}
	what := "the password in --redis-url"
	if upstream {
		what = "REDIS_AUTH"
	}
	log.Warn(what+" is not used: this Redis has no password (requirepass), so anyone who reaches it may use it; give Redis one, or drop "+what, "url", Redact(raw))
}

// redisConfigError reports whether err is Redis refusing what --redis-url
// asks of it — the password, the user, the database, Cluster or Sentinel
// mode — and what to change. Only a server's reply counts: a refused or
// timed-out connection, and replies that say Redis is busy (LOADING,
// MASTERDOWN, CLUSTERDOWN, TRYAGAIN, ...), are outages, not configuration
// errors.
func redisConfigError(err error) (hint string, ok bool) {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return "", false
	}
	msg := re.Error()
	switch {
	case redis.IsAuthError(err):
		return "the password, or user and password, in --redis-url is missing or wrong: redis://:PASSWORD@host or redis://USER:PASSWORD@host", true
	case redis.IsPermissionError(err):
		return "the --redis-url user may not run PING, EVAL and EVALSHA: grant them in its ACL", true
	case strings.Contains(msg, "DB index is out of range"), strings.Contains(msg, "invalid DB index"):
		return "the /N at the end of --redis-url picks a database this server does not have (its `databases` setting); /0 always exists", true
	case strings.Contains(msg, "cluster support disabled"):
		return "redis+cluster:// and several addr= are for a Redis Cluster and this server is a single instance: use redis://host:port/0", true
	case strings.Contains(msg, "unknown command 'sentinel'"):
		return "master_name= makes the host a Sentinel and this server is not one: point it at a sentinel, or drop master_name=", true
	}
	return "", false
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

// Redact returns a URL with its password replaced, for logs and errors:
// redact.URL, which internal packages share, under the name cmd's call
// sites use.
func Redact(raw string) string { return redact.URL(raw) }

// redactErr keeps a parse error from echoing a password.
func redactErr(err error, raw string) error {
	u, perr := url.Parse(raw)
	if perr != nil {
		return err
	}
	msg := err.Error()
	if pw, ok := u.User.Password(); ok && pw != "" {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	}
	if pw := u.Query().Get("password"); pw != "" {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	}
	if msg == err.Error() {
		return err
	}
	return fmt.Errorf("%s", msg)
}

// slogRedis routes go-redis's own log lines (dial failures and the like)
// into the sidecar's logger, so --log-format json stays JSON. A failed dial
// is logged at debug level: the store probe already says, once, that Redis
// is unreachable and why, and would otherwise repeat it every probe.
type slogRedis struct{ log *slog.Logger }

func (l slogRedis) Printf(ctx context.Context, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	level := slog.LevelWarn
	if strings.Contains(msg, "failed to dial") {
		level = slog.LevelDebug
	}
	l.log.Log(ctx, level, "redis client", "detail", msg)
}
