// Package grammar constrains sampling to the sentences of a grammar: it
// parses llama.cpp's GBNF format (and converts JSON Schema to it), follows
// a sequence's output through the grammar, and gives for each step the
// mask of tokens that can continue a valid sentence.
//
// # Algorithm
//
// Parse reads GBNF (rules, alternation, groups, string literals and
// character classes with escapes \x \u \U \t \n \r, negated classes, '.',
// the repetitions * + ? {m} {m,} {m,n}, # comments; the start rule is
// root) and compiles it to a program over bytes, not code points: a
// character class becomes alternatives of UTF-8 byte-range sequences (as
// Go's regexp compiler splits them, surrogates excluded), so a character
// split across tokens is simply a parse that stopped between two bytes.
// Repetitions become generated rules as llama.cpp writes them (x* ::= x
// x* | ε, x{m,n} as m copies and nested optionals).
//
// Matching follows llama.cpp's llama-grammar: a set of pushdown stacks of
// program positions, each stack's top a byte class to match next; a byte
// advances the stacks whose top accepts it and expands rule references
// and rule ends until every top is a terminal again (a stack that
// empties means the input so far is a complete sentence). Unlike
// llama.cpp, stacks are hash-consed into shared (position, parent) nodes,
// a set of stacks is interned as a state, and transitions are cached in a
// table state x byte -> state, so the pushdown automaton is determinised
// lazily and, once warm, a byte costs one table load. A reference in tail
// position pushes nothing, so x* loops in constant stack depth and its
// states repeat. Left recursion that would grow the stack (also through
// rules that can match nothing) is refused at parse time.
//
// Masks come from the vocabulary's byte trie (Vocab), flattened in
// preorder, walked together with the transition table: a byte that kills
// every stack skips its whole subtree in one jump; a token ending at a
// live node is allowed. End-of-generation tokens are allowed exactly when
// the state can end. Three things keep this fast at a 150K-token
// vocabulary:
//   - a state's mask is cached (64 per Matcher), so the common steps
//     (inside a string, the same place in a repeated object) cost a
//     lookup;
//   - for a state where many bytes lead on to one common state (the inside
//     of a string: back to itself; a string with maxLength: one count
//     further, chain.go), the tokens made only of those "plain" characters
//     are allowed exactly when they are short enough for the chain, a
//     bitset that depends only on the chain's signature (which ASCII bytes
//     are plain, whether every multi-byte character is) and the length
//     left; the Vocab keeps it per signature with a compact trie of the
//     remaining tokens (split.go), so a new string state costs a copy and
//     a walk of a trie a few percent the size of the whole;
//   - a transition computed for one byte is filled in for every byte the
//     state's terminals cannot tell apart from it;
//   - in other walks, a subtree whose bytes all loop on the current state
//     is accepted whole from per-node summaries.
//
// See bench_test.go for the costs (BenchmarkMask).
//
// # Limits
//
//   - Token references (<[id]>) of newer llama.cpp are not supported.
//   - States that are neither string-like nor nearly dead (a class of few
//     bytes repeated, such as [a-z]*) walk the whole trie the first time:
//     milliseconds at 150K tokens; later visits hit the mask cache.
//   - Grammars whose live stacks explode (deeply nested nullable
//     repetitions) fail with ErrTooComplex; limits also bound the stack
//     nodes, states and the work a machine may spend.
//   - A Matcher allocates when it meets a state for the first time (new
//     transitions, a mask slot); after that Mask and Accept allocate
//     nothing.
//   - JSON Schema: see schema.go for what is supported; formats other than
//     date, time, date-time and uuid are annotations and not enforced;
//     number bounds only as integers.
package grammar
