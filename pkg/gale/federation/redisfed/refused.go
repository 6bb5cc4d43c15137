package redisfed

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/pkg/gale/federation"
)

// refusal returns err, wrapping federation.ErrRefused beside it when Redis
// answered and refused this request itself (refusedReply); nil stays nil.
func refusal(err error) error {
	if err != nil && refusedReply(err) {
		return fmt.Errorf("%w (%w)", err, federation.ErrRefused)
	}
	return err
}

// refusedReply reports whether err holds a Redis reply refusing this
// request for its key or its key's stored value, which other keys do not
// share:
//
//   - WRONGTYPE: the key's name holds another type (another program's
//     value);
//   - CROSSSLOT: the script's keys lie in different Cluster slots (a key
//     whose hash tag is empty: see the package comment);
//   - ERR raised while running the script (Redis's message then names
//     "user_script"): the script's own error() on a malformed stored state,
//     or a command it called refusing its arguments.
//
// Everything else says Redis cannot serve requests now, whatever their
// keys, and is no refusal: LOADING, READONLY, CLUSTERDOWN, MASTERDOWN,
// TRYAGAIN, BUSY, NOSCRIPT, OOM, MISCONF, NOREPLICAS, NOAUTH, NOPERM, a
// script killed by SCRIPT KILL, an ERR from outside the script (a proxy's
// "no upstream host", an unknown command), and every error without a
// reply: a network error, a timeout, a closed client.
func refusedReply(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "WRONGTYPE", "CROSSSLOT":
		return true
	case "ERR":
		return strings.Contains(msg, "user_script") && !strings.Contains(msg, "SCRIPT KILL")
	}
	return false
}
