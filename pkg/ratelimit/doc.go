// Package ratelimit holds the types the engine and its adapters share: a
// rate-limit Request and the Response it gets, the Trace of a decision, the
// gate a request goes through (GateChoice, Held) and the cost limit it
// reserves (CostChoice, Reservation, Settlement). It is the vocabulary of
// pkg/engine without the engine: it imports neither the policy nor the
// limiters, so an adapter (pkg/envoyrls) speaks to the engine through it and
// depends on nothing below. pkg/engine names every type here again (type
// aliases), so its callers may use either name.
package ratelimit
