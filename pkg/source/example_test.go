package source_test

import (
	"fmt"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/throttlekit/throttlekit/pkg/source"
)

// A pushed RateLimitConfig becomes a policy set validated as a file is;
// its errors name the resource and the field.
func ExampleBuildSet() {
	cfg := &rlsconfv3.RateLimitConfig{Name: "edge-limits", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key:       "remote_address",
		RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 10},
	}}}
	set, err := source.BuildSet([]*rlsconfv3.RateLimitConfig{cfg}, nil)
	if err != nil {
		panic(err)
	}
	d := set.Domains[0]
	l := d.Descriptors[0].Limits[0]
	fmt.Println(d.Name, d.File, d.Descriptors[0].Key, l.RequestsPerUnit, l.Unit)

	cfg.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	_, err = source.BuildSet([]*rlsconfv3.RateLimitConfig{cfg}, nil)
	fmt.Println(err)
	// Output:
	// edge xds:RateLimitConfig/edge-limits remote_address 10 second
	// RateLimitConfig "edge-limits": descriptors[0].rate_limit.unit: UNKNOWN is not a unit; want SECOND, MINUTE, HOUR or DAY (week, month and year: set the whole rate_limit in the overlay)
}
