package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/throttlekit/throttlekit/pkg/ratelimit"
)

// A cost read from a response header, and a request overriding its limit.
func Example() {
	n, err := ratelimit.ParseCost(" 1200 ")
	fmt.Println(n, err)
	_, err = ratelimit.ParseCost("-3")
	fmt.Println(err)
	req := ratelimit.Request{Domain: "api", Descriptors: []ratelimit.Descriptor{{
		Entries:  []ratelimit.Entry{{Key: "tenant", Value: "acme"}},
		Override: &ratelimit.Override{RequestsPerUnit: 10, Unit: ratelimit.Minute},
	}}}
	fmt.Println(req.Descriptors[0].Override.Unit.Duration() == time.Minute, ratelimit.CodeOverLimit)
	// Output:
	// 1200 <nil>
	// not a cost: "-3" is not a whole number of units
	// true OVER_LIMIT
}
