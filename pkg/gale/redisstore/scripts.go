package redisstore

import (
	"crypto/sha1"
	_ "embed" // the Lua scripts
	"encoding/hex"
)

// Each script is the shared part — the arguments and the state hash
// (prelude.lua), window bounds (window.lua) and the strategy arithmetic
// (strategy.lua) — followed by one operation's body. See scripts/prelude.lua
// for the argument layout.
var (
	//go:embed scripts/prelude.lua
	preludeLua string
	//go:embed scripts/window.lua
	windowLua string
	//go:embed scripts/strategy.lua
	strategyLua string
	//go:embed scripts/check.lua
	checkLua string
	//go:embed scripts/check_fixed.lua
	checkFixedLua string
	//go:embed scripts/lease.lua
	leaseLua string
	//go:embed scripts/return.lua
	returnLua string
	//go:embed scripts/return_once.lua
	returnOnceLua string
	//go:embed scripts/ledger.lua
	ledgerLua string
	//go:embed scripts/charge.lua
	chargeLua string
)

// op is one of the store operations, each with its own script, and a check
// of a fixed window, which has a script of its own (check_fixed.lua).
type op uint8

const (
	opCheck op = iota
	opLease
	opReturn
	opCheckFixed
	opCharge
)

func (o op) String() string {
	switch o {
	case opCheck, opCheckFixed:
		return "check"
	case opLease:
		return "lease"
	case opCharge:
		return "charge"
	}
	return "return"
}

// script is a Lua source with its SHA1 digest, the name EVALSHA calls it by.
// The digest is computed here rather than taken from SCRIPT LOAD, so the store
// needs no round trip to start: the first EVALSHA on a server that has not
// seen the script fails with NOSCRIPT, and the EVAL that follows caches it.
type script struct {
	// src and sha are boxed once, so that putting them in a command's
	// arguments does not allocate.
	src, sha any
}

func newScript(body string) script { return standalone(compose(body)) }

// standalone is the script whose whole source is src.
func standalone(src string) script {
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

// compose returns the source of the script whose operation is body: the
// shared part, then body.
func compose(body string) string {
	return preludeLua + "\n" + windowLua + "\n" + strategyLua + "\n" + body
}

// scripts holds the script of each op, indexed by op.
var scripts = [...]script{
	opCheck:  newScript(checkLua),
	opLease:  newScript(leaseLua),
	opReturn: newScript(returnLua),
	// The composed check script would answer a fixed window the same (and
	// does: TestFixedCheckMatchesComposed); this one costs Redis less.
	opCheckFixed: standalone(checkFixedLua),
	opCharge:     newScript(chargeLua),
}
