package quant

// TileRows is the rows of a transposed tile.
//
// A transposed tile stores TileRows rows of rb bytes each (rows of one
// type: float values, ggml blocks or TurboQuant codes) unit-major: the rows'
// bytes are cut into units of u bytes (a float's 4 or 2 bytes, or single
// bytes), and byte p of row r is at
//
//	(p/u·TileRows + r)·u + p%u
//
// so that a tile's first units of all rows come first, then their second
// units, and so on. A vector register of 16 lanes loaded from one unit's
// run then holds one value (or one byte of codes) of every row: a dot
// product of a query against the tile's rows is a chain of multiply-adds
// of the broadcast query value, with no sums across lanes. The tile holds
// TileRows·rb bytes, as many as its rows stored one after another.
const TileRows = 16

// WholeTiles returns n rows rounded up to whole tiles (a multiple of
// TileRows).
func WholeTiles(n int) int { return (n + TileRows - 1) / TileRows * TileRows }

// PutTileRow stores row (rb bytes, a multiple of u) as row r of tile.
func PutTileRow(tile []byte, r, u int, row []byte) {
	switch u {
	case 1:
		for p, b := range row {
			tile[p*TileRows+r] = b
		}
	case 2:
		for p := 0; p+1 < len(row); p += 2 {
			i := (p/2*TileRows + r) * 2
			tile[i], tile[i+1] = row[p], row[p+1]
		}
	default:
		for p := 0; p < len(row); p += u {
			copy(tile[(p/u*TileRows+r)*u:][:u], row[p:p+u])
		}
	}
}

// TileRow copies row r of tile (len(row) bytes, a multiple of u) to row.
func TileRow(row, tile []byte, r, u int) {
	switch u {
	case 1:
		for p := range row {
			row[p] = tile[p*TileRows+r]
		}
	case 2:
		for p := 0; p+1 < len(row); p += 2 {
			i := (p/2*TileRows + r) * 2
			row[p], row[p+1] = tile[i], tile[i+1]
		}
	default:
		for p := 0; p < len(row); p += u {
			copy(row[p:p+u], tile[(p/u*TileRows+r)*u:][:u])
		}
	}
}

// TileUnit returns the unit a row of type t is transposed in: the bytes of
// one value of a float type (F32, F16, BF16), 1 for block types, whose
// values are bytes or nibbles of bytes (and whose scales a reader
// reassembles from their bytes).
func TileUnit(t Type) int {
	switch t {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	return 1
}
