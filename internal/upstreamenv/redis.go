package upstreamenv

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/throttlekit/throttlekit/internal/redact"
)

// redisURL writes the --redis-url that envoyproxy/ratelimit's Redis
// variables (set: the variables set) describe:
//
//	REDIS_TYPE single:   REDIS_URL host:port             → redis://host:port/0
//	REDIS_TYPE sentinel: REDIS_URL master,host:port,...  → redis://host:port/0?master_name=master&addr=...
//	REDIS_TYPE cluster:  REDIS_URL host:port,host:port   → redis+cluster://host:port?addr=...
//
// REDIS_AUTH (password, or user:password) becomes the URL's user
// information, or for a Sentinel-managed primary its password= and
// username= (the URL's user information would be the sentinels'); REDIS_TLS
// makes the scheme rediss; REDIS_POOL_SIZE adds pool_size=. Errors name the
// variable and never show REDIS_AUTH.
func redisURL(set map[string]string, useTLS bool) (string, error) {
	raw := set["REDIS_URL"]
	switch st := strings.ToLower(set["REDIS_SOCKET_TYPE"]); {
	case st == "unix" || strings.HasPrefix(raw, "/"):
		return "", fmt.Errorf("REDIS_SOCKET_TYPE=unix (REDIS_URL %q): throttlekit connects to Redis over TCP only: set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port", raw)
	case st != "" && st != "tcp":
		return "", fmt.Errorf("REDIS_SOCKET_TYPE=%q: want tcp", set["REDIS_SOCKET_TYPE"])
	}
	if strings.Contains(raw, "://") {
		return "", fmt.Errorf("REDIS_URL %s: want host:port, as envoyproxy/ratelimit reads it (a redis:// URL goes in --redis-url)", redact.URL(raw))
	}
	var hosts []string
	for _, h := range strings.Split(raw, ",") {
		hosts = append(hosts, strings.TrimSpace(h))
	}
	u := url.URL{Scheme: "redis", Path: "/0"}
	if useTLS {
		u.Scheme = "rediss"
	}
	var user, password string
	if auth := set["REDIS_AUTH"]; auth != "" {
		password = auth
		if name, pw, ok := strings.Cut(auth, ":"); ok {
			user, password = name, pw
		}
	}
	q := url.Values{}
	typ := strings.ToLower(set["REDIS_TYPE"])
	switch typ {
	case "", "single":
		if len(hosts) != 1 {
			return "", fmt.Errorf("REDIS_URL %q: REDIS_TYPE single wants one host:port (several are REDIS_TYPE=cluster; a master name first is REDIS_TYPE=sentinel)", raw)
		}
	case "sentinel":
		if len(hosts) < 2 || hosts[0] == "" || strings.Contains(hosts[0], ":") {
			return "", fmt.Errorf("REDIS_URL %q: REDIS_TYPE sentinel wants the master's name, then each sentinel's host:port: mymaster,sentinel-a:26379,sentinel-b:26379", raw)
		}
		q.Set("master_name", hosts[0])
		hosts = hosts[1:]
		if password != "" {
			q.Set("password", password)
		}
		if user != "" {
			q.Set("username", user)
		}
		user, password = "", ""
	case "cluster":
		u.Scheme += "+cluster"
		u.Path = ""
	default:
		return "", fmt.Errorf("REDIS_TYPE=%q: want single, sentinel or cluster", set["REDIS_TYPE"])
	}
	for i, h := range hosts {
		if host, port, err := net.SplitHostPort(h); err != nil || host == "" || port == "" {
			return "", fmt.Errorf("REDIS_URL %q: %q is not host:port (e.g. redis.example:6379)", raw, h)
		}
		if i == 0 {
			u.Host = h
		} else {
			q.Add("addr", h)
		}
	}
	switch {
	case user != "":
		u.User = url.UserPassword(user, password)
	case password != "":
		u.User = url.UserPassword("", password)
	}
	if ps, ok := set["REDIS_POOL_SIZE"]; ok {
		if n, err := strconv.Atoi(ps); err != nil || n < 1 {
			return "", fmt.Errorf("REDIS_POOL_SIZE=%q: want a positive number of connections (upstream's default: 10)", ps)
		}
		q.Set("pool_size", ps)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}
