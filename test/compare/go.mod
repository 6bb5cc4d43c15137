module github.com/throttlekit/throttlekit/test/compare

go 1.26.0

// peer-vegas and peer-gradient draw from math/rand's global source; Seed
// makes their runs reproducible only with the pre-Go 1.24 behaviour
// (see peers.go).
godebug randseednop=0

require (
	github.com/platinummonkey/go-concurrency-limits v0.8.0
	github.com/throttlekit/throttlekit v0.0.0
)

require (
	codeberg.org/go-fonts/liberation v0.5.0 // indirect
	codeberg.org/go-latex/latex v0.2.0 // indirect
	codeberg.org/go-pdf/fpdf v0.11.1 // indirect
	git.sr.ht/~sbinet/gg v0.7.0 // indirect
	github.com/ajstarks/svgo v0.0.0-20211024235047-1546f124cd8b // indirect
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	golang.org/x/image v0.30.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	gonum.org/v1/plot v0.17.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

replace github.com/throttlekit/throttlekit => ../..
