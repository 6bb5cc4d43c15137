package model_test

import (
	"fmt"

	"github.com/throttlekit/throttlekit/pkg/gale/model"
)

// Two nodes lease batches of 2 from a limit of 4 per window. Uncoupled,
// credits carried across the boundary let one window admit 4 + 2·(2−1) = 6;
// window-coupled, no window admits more than 4. Find returns a shortest run
// breaking an invariant.
func Example() {
	for _, coupled := range []bool{false, true} {
		sp, err := model.Explore(model.Config{Nodes: 2, Limit: 4, Batch: 2, Windows: 2, Coupled: coupled})
		if err != nil {
			panic(err)
		}
		fmt.Printf("coupled=%v: %d states, max admitted per window %d\n", coupled, sp.States(), sp.MaxAdmitted())
	}
	sp, _ := model.Explore(model.Config{Nodes: 2, Limit: 4, Batch: 2, Windows: 2})
	tr, found := sp.Find(func(s model.State) bool { return s.Admitted <= 5 })
	fmt.Println("admitted ≤ 5 violated:", found)
	fmt.Print(tr)
	// Output:
	// coupled=false: 29 states, max admitted per window 6
	// coupled=true: 12 states, max admitted per window 4
	// admitted ≤ 5 violated: true
	// initial                              window 0  L2 4  admitted 0  credits [0 0]
	// node 0 leases 2 and admits one       window 0  L2 2  admitted 1  credits [1 0]
	// node 1 leases 2 and admits one       window 0  L2 0  admitted 2  credits [1 1]
	// the window rolls                     window 1  L2 4  admitted 0  credits [1 1]
	// node 0 serves from its credits       window 1  L2 4  admitted 1  credits [0 1]
	// node 0 leases 2 and admits one       window 1  L2 2  admitted 2  credits [1 1]
	// node 0 serves from its credits       window 1  L2 2  admitted 3  credits [0 1]
	// node 0 leases 2 and admits one       window 1  L2 0  admitted 4  credits [1 1]
	// node 0 serves from its credits       window 1  L2 0  admitted 5  credits [0 1]
	// node 1 serves from its credits       window 1  L2 0  admitted 6  credits [0 0]
}
