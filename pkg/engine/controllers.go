package engine

import (
	"cmp"
	"errors"
	"hash/fnv"
	"math/rand/v2"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// newController builds a gate's controller from its policy; a problem with
// one parameter is reported where that parameter is written.
func newController(spec *policy.Gate) (adaptive.Controller, policy.Errors) {
	params := make(map[string]string, len(spec.Params))
	for k, p := range spec.Params {
		params[k] = p.Value
	}
	h := fnv.New64a()
	h.Write([]byte(spec.Name))
	ctl, err := adaptive.NewNamed(spec.Controller, adaptive.Limits{Min: spec.MinLimit, Max: spec.MaxLimit, Initial: spec.InitialLimit},
		params, rand.New(rand.NewPCG(h.Sum64(), 0x5eed)))
	if err == nil {
		return ctl, nil
	}
	var pe *adaptive.ParamError
	if errors.As(err, &pe) {
		return nil, policy.Errors{{Pos: spec.Params[pe.Param].Pos, Field: cmp.Or(spec.Field, "concurrency") + ".params." + pe.Param, Msg: pe.Msg}}
	}
	return nil, policy.Errors{{Pos: spec.Pos, Field: cmp.Or(spec.Field, "concurrency"), Msg: err.Error()}}
}
