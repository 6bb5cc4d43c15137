package e2e

import "time"

// slackStoreTimeout is --store-timeout for a sidecar whose test does not
// measure the store's deadline: long enough that a loaded machine (a
// second make test beside this one) cannot miss it, so that a slow healthy
// call is never taken for the store failing.
const slackStoreTimeout = 2 * time.Second

// sampleDeadline bounds a wait for the traffic a test samples before it
// judges (healthy answers before a fault, calls before a signal). The rate
// they come at is the machine's and is not judged (a loaded one answers a
// tenth as fast): the deadline only stops a sidecar that answers nothing.
const sampleDeadline = 60 * time.Second

// judgeAttempts is how many times a test that judges time measures before
// it fails: a judgement the load spoiled is made again, and only a second
// and third spoiled one fail, naming the load each saw.
const judgeAttempts = 3
