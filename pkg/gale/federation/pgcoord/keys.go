package pgcoord

import (
	"crypto/sha256"
	"fmt"
)

// Stored keys. Both tables' primary keys are btree indexes, which refuse an
// entry over 2,704 bytes (a third of an 8 kB page; over 8,191 bytes the
// server refuses it before compressing), while the engine's keys reach
// about 132 KiB. A key is therefore stored as storedKey says:
//
//   - a key of at most MaxStoredKey bytes whose first byte is not
//     hashedMark is stored as it is, as it always was: an upgrade resets
//     no counter and orphans no marker of such a key;
//   - any other key (longer, or starting with hashedMark) is stored as
//     hashedMark followed by the 32 bytes of its SHA-256.
//
// The mapping is injective (short of a SHA-256 collision): a stored form
// starting with hashedMark is a hash, one starting with anything else the
// key itself, so no key kept whole can equal another's hash, and two keys
// sharing all but their last byte hash apart. hashedMark is 0xFF, which
// no key the engine builds starts with (they start with an ASCII digit,
// the length of the domain's field: pkg/engine's key.go), nor any valid
// UTF-8. Only a caller's own key that starts with 0xFF, or one longer than
// MaxStoredKey that its index took compressed, changes its stored form on
// upgrade: its counter restarts once.
//
// MaxStoredKey leaves room in the marker table's entry, whose key is (key,
// window_end, token): beside the longest token (federation.MaxToken
// bytes) and the bigint, PostgreSQL 15 takes incompressible keys of up to
// 2,420 bytes there (2,692 in the budget table's), so 2,048 keeps 372 bytes
// of margin (TestConformance/StoredKeys stores one in both tables).

// MaxStoredKey is the longest key stored as it is, in bytes; a longer one
// is stored as a hash (see storedKey).
const MaxStoredKey = 2048

// hashedMark is the first byte of every hashed key's stored form, and of
// no key stored as it is.
const hashedMark = 0xff

// storedKey returns key's stored form: key itself when it has at most
// MaxStoredKey bytes and does not start with hashedMark, otherwise
// hashedMark and key's SHA-256.
func storedKey(key string) []byte {
	if len(key) <= MaxStoredKey && (key == "" || key[0] != hashedMark) {
		return []byte(key)
	}
	sum := sha256.Sum256([]byte(key))
	return append([]byte{hashedMark}, sum[:]...)
}

// quoteKey is key quoted for an error message: whole up to 64 bytes, and a
// longer one cut there and its length given, so that one request's long
// key cannot fill a log.
func quoteKey(key string) string {
	const show = 64
	if len(key) <= show {
		return fmt.Sprintf("%q", key)
	}
	return fmt.Sprintf("%q… (%d bytes)", key[:show], len(key))
}
