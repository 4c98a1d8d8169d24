// This file bounds what decoding a request body may allocate. encoding/json
// turns every JSON object of an array into a Go struct of 50 to 200 bytes
// (and grows the slice by doubling), so a 1 MiB body of "{}," repeated
// allocated about 100 MiB before any field was checked. Counting the
// objects first, outside strings, caps that at MaxJSONObjects structs.

package serve

// MaxJSONObjects bounds the JSON objects in one request body: far above a
// real conversation (one object per message or content part), and what
// keeps decoding a body within a small multiple of its size.
const MaxJSONObjects = 1 << 16

// countObjects counts the '{' of body outside strings, stopping past limit.
func countObjects(body []byte, limit int) int {
	n := 0
	inString, escaped := false, false
	for _, c := range body {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{':
			if n++; n > limit {
				return n
			}
		}
	}
	return n
}
