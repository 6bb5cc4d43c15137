package source

import (
	"errors"
	"fmt"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

// RateLimitConfigType is the type URL of the resources the xDS source
// subscribes to, envoyproxy/ratelimit's.
const RateLimitConfigType = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// ErrNoResources is returned by BuildSet for a push without a single
// RateLimitConfig (and an overlay without gate files): an empty policy
// would admit every request, so it is refused as an empty policy
// directory is (policy.ErrEmpty), and the policy in use stays.
var ErrNoResources = errors.New("source: the push holds no RateLimitConfig resource")

// DecodeResources unpacks a push's resources, naming the one that is not
// a RateLimitConfig or does not decode.
func DecodeResources(resources []*anypb.Any) ([]*rlsconfv3.RateLimitConfig, error) {
	cfgs := make([]*rlsconfv3.RateLimitConfig, 0, len(resources))
	for i, r := range resources {
		if r.GetTypeUrl() != RateLimitConfigType {
			return nil, fmt.Errorf("resource %d has type %q; want %s", i, r.GetTypeUrl(), RateLimitConfigType)
		}
		cfg := &rlsconfv3.RateLimitConfig{}
		if err := anypb.UnmarshalTo(r, cfg, proto.UnmarshalOptions{}); err != nil {
			return nil, fmt.Errorf("resource %d: not a RateLimitConfig: %w", i, err)
		}
		cfgs = append(cfgs, cfg)
	}
	return cfgs, nil
}

// BuildSet turns the resources of one push, with the overlay's extensions
// (nil for none), into a policy set validated exactly as a directory of
// files is (policy.LoadData): each resource is one file named
// ResourceFile(name). Two resources with one name, a resource that cannot
// become YAML (ConfigError), an overlay conflict and every policy error are
// reported together.
func BuildSet(cfgs []*rlsconfv3.RateLimitConfig, overlay *Overlay) (*policy.Set, error) {
	var files []policy.Data
	var errs []error
	seen := map[string]bool{}
	for _, cfg := range cfgs {
		if seen[cfg.GetName()] {
			errs = append(errs, &ConfigError{Resource: cfg.GetName(), Field: "name", Msg: "two resources have this name; each RateLimitConfig needs its own"})
			continue
		}
		seen[cfg.GetName()] = true
		doc, err := ConfigYAML(cfg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := overlay.apply(cfg.GetDomain(), doc); err != nil {
			errs = append(errs, fmt.Errorf("RateLimitConfig %q (domain %q): overlay: %w", cfg.GetName(), cfg.GetDomain(), err))
			continue
		}
		data, err := yaml.Marshal(doc)
		if err != nil {
			errs = append(errs, &ConfigError{Resource: cfg.GetName(), Msg: fmt.Sprintf("cannot be written as YAML: %v", err)})
			continue
		}
		files = append(files, policy.Data{Name: ResourceFile(cfg.GetName()), Bytes: data})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(cfgs) == 0 {
		return nil, fmt.Errorf("%w; an empty policy would admit every request, so the policy in use stays (push at least one)", ErrNoResources)
	}
	if overlay != nil {
		files = append(files, overlay.plain...)
	}
	return policy.LoadData(files...)
}
