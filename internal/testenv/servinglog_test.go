package testenv

import "testing"

// The serving line is found across split writes and sent once; the rest
// is kept, and Records finds records by msg.
func TestServingLog(t *testing.T) {
	l := NewServingLog()
	for _, w := range []string{`{"msg":"starting"}` + "\n" + `{"msg":"serv`, `ing","grpc":"127.0.0.1:1","http":"127.0.0.1:2"}` + "\n",
		`{"msg":"serving","grpc":"x","http":"y"}` + "\nnot json\n"} {
		if _, err := l.Write([]byte(w)); err != nil {
			t.Fatal(err)
		}
	}
	if a := <-l.Serving; a != (ServingAddrs{GRPC: "127.0.0.1:1", HTTP: "127.0.0.1:2"}) {
		t.Fatalf("serving %+v, want the first line's addresses", a)
	}
	select {
	case a := <-l.Serving:
		t.Fatalf("a second serving line was sent: %+v", a)
	default:
	}
	if n := len(l.Records("serving")); n != 2 {
		t.Fatalf("%d serving records, want 2", n)
	}
}
