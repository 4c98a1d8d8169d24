// pretok.go: BPE pre-tokenizer settings per tokenizer.ggml.pre value — the
// split regexes and the flags llama.cpp ties to each pre-tokenizer.
//
// The regexes are kept in llama.cpp's spelling (llm_tokenizer_bpe), because
// llama.cpp picks its hand-written splitters by comparing the exact regex
// text; split.go does the same. Pre-tokenizers that need llama.cpp's other
// custom code (kimi-k2, afmoe, tiny_aya/cohere2moe) are not supported.

package tokenizer

// Regexes llama.cpp recognises and runs with hand-written code.
const (
	reGPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
	// reLlama3Orig is the original Llama 3 regex; llama.cpp maps it to the
	// same code as reLlama3.
	reLlama3Orig = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
	reLlama3     = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
	reQwen2      = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
	reQwen35     = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
	reNewlines   = "[^\\n]+|[\\n]+"
)

// preKind identifies a pre-tokenizer family (llama.cpp's llama_vocab_pre_type).
type preKind int

const (
	preDefault preKind = iota
	preLlama3
	preJais2
	preDBRX // also smaug
	preDeepseekLLM
	preDeepseek3
	preYoutu
	preDeepseekCoder
	preFalcon
	preStarcoder // also refact, command-r, smollm, codeshell, exaone, minerva, mellum2
	preGPT2      // also mpt, olmo, jais, trillion, granite-docling
	preQwen2     // also stablelm2, hunyuan, solar-open
	preQwen35
	prePoro // also bloom, gpt3-finnish
	preChatGLM4
	preViking
	preTekken
	preChameleon
	preGPT4o // also minimax-m2
	preGraniteEmbMulti
	preSuperBPE
	preBailingMoE
	preSeedCoder
	preGrok2
	preLaguna
	preExaoneMoE
	preGemma4
	preSarvamMoE
	preMiniCPM5
	preWhitespace
)

// preConfig is what a tokenizer.ggml.pre value selects.
type preConfig struct {
	kind         preKind
	clean        bool // clean_up_tokenization_spaces when detokenizing
	ignoreMerges bool // a word that is a whole token skips BPE merging
	addBOS       bool // default of add_bos_token (metadata overrides)
	noBOS        bool // the default BOS id is dropped (chatglm)
	escapeWS     bool // spaces become U+2581 before BPE (SPM-style BPE)
}

// preConfigFor maps tokenizer.ggml.pre to its settings, as llama.cpp's
// vocab loader does. ok is false for an unknown or unsupported name.
func preConfigFor(pre string) (preConfig, bool) {
	c := preConfig{clean: true}
	switch pre {
	case "", "default":
		c.kind = preDefault
	case "minicpm5":
		c.kind, c.ignoreMerges = preMiniCPM5, true
	case "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano":
		// "pixtral" is also what Nemotron-H's GGUFs declare (their
		// tokenizer hashes as pixtral-12b's in convert_hf_to_gguf):
		// TestNemotronHPreTokenizer checks it against llama-tokenize
		c.kind, c.ignoreMerges, c.addBOS = preLlama3, true, true
	case "deepseek-llm":
		c.kind, c.clean = preDeepseekLLM, false
	case "deepseek-coder":
		c.kind, c.clean = preDeepseekCoder, false
	case "deepseek-v3":
		c.kind, c.clean = preDeepseek3, false
	case "youtu":
		c.kind, c.clean, c.ignoreMerges = preYoutu, false, true
	case "falcon":
		c.kind = preFalcon
	case "mpt":
		c.kind = preGPT2
	case "starcoder":
		c.kind = preStarcoder
	case "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum", "modern-bert":
		c.kind = preGPT2
	case "jais-2":
		c.kind = preJais2
	case "gemma4", "granite-embed-multi-311m":
		c.kind, c.escapeWS = preGemma4, true
	case "sarvam-moe":
		c.kind, c.escapeWS, c.clean = preSarvamMoE, true, false
	case "jina-v1-en", "jina-v2-code", "roberta-bpe":
		c.kind = preGPT2
	case "whitespace":
		c.kind = preWhitespace
	case "refact":
		c.kind = preStarcoder
	case "command-r":
		c.kind, c.clean = preStarcoder, false
	case "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2":
		c.kind, c.clean = preQwen2, false
	case "qwen35":
		c.kind, c.clean = preQwen35, false
	case "stablelm2":
		c.kind = preQwen2
	case "olmo":
		c.kind = preGPT2
	case "dbrx", "smaug-bpe":
		c.kind = preDBRX
	case "poro-chat":
		c.kind, c.clean = prePoro, false
	case "glm4", "chatglm-bpe":
		c.kind, c.noBOS = preChatGLM4, true
	case "viking":
		c.kind, c.clean = preViking, false
	case "jais":
		c.kind = preGPT2
	case "tekken":
		c.kind, c.clean, c.ignoreMerges, c.addBOS = preTekken, false, true, true
	case "smollm":
		c.kind, c.clean = preStarcoder, false
	case "codeshell", "exaone", "minerva-7b", "mellum2":
		c.kind = preStarcoder
	case "bloom", "gpt3-finnish":
		c.kind = prePoro
	case "exaone4":
		c.kind = preGPT2
	case "exaone-moe":
		c.kind = preExaoneMoE
	case "chameleon":
		c.kind, c.addBOS, c.clean = preChameleon, true, false
	case "megrez":
		c.kind = preQwen2
	case "gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2":
		c.kind, c.clean = preGPT4o, false
	case "granite-embed-multi-97m":
		c.kind, c.clean, c.ignoreMerges = preGraniteEmbMulti, false, true
	case "superbpe":
		c.kind, c.clean = preSuperBPE, false
	case "trillion", "granite-docling":
		c.kind, c.clean = preGPT2, false
	case "bailingmoe", "bailingmoe2", "llada-moe":
		c.kind, c.clean = preBailingMoE, false
	case "seed-coder":
		c.kind, c.clean = preSeedCoder, false
	case "hunyuan", "solar-open":
		c.kind, c.clean = preQwen2, false
	case "hunyuan-dense", "joyai-llm":
		c.kind, c.clean = preDeepseek3, false
	case "grok-2":
		c.kind, c.clean = preGrok2, false
	case "laguna":
		c.kind, c.clean = preLaguna, false
	case "kimi-k2", "afmoe", "tiny_aya", "cohere2moe":
		// llama.cpp splits these with custom code we do not replicate.
		return c, false
	default:
		return c, false
	}
	return c, true
}

// rawBytes reports whether BPE runs on raw UTF-8 (byte fallback through
// <0xXX> tokens) instead of GPT-2's byte-to-unicode encoding.
func (k preKind) rawBytes() bool {
	return k == preGemma4 || k == preSarvamMoE || k == preWhitespace
}

// regexes returns the split regexes of a family, applied in order.
func (k preKind) regexes() []string {
	switch k {
	case preLlama3, preDBRX, preChatGLM4:
		return []string{reLlama3}
	case preJais2:
		return []string{"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}"}
	case preDeepseekLLM:
		return []string{
			"[\r\n]",
			"\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943]+",
			"\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+",
			"\\s+$",
			"[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+",
			"\\p{N}+",
		}
	case preDeepseek3:
		return []string{
			"\\p{N}{1,3}",
			"[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+",
			"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
		}
	case preYoutu:
		return []string{
			"[\uAC00-\uD7A3\u3131-\u318E]+|[\uFF01\u2026\u201C\u201D\u2018\u2019\u2014\uFF1A\uFF1B\uFF0C\u3001-\u303F\uFE30-\uFE4F]+|[\u3105-\u312F]+|[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+",
			"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
		}
	case preDeepseekCoder:
		return []string{
			"[\r\n]",
			"\\s?\\p{L}+",
			"\\s?\\p{P}+",
			"[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+",
			"\\p{N}",
		}
	case preFalcon:
		return []string{
			"[\\p{P}\\$\\+<=>\\^~\\|`]+",
			reGPT2,
			"[0-9][0-9][0-9]",
		}
	case preStarcoder:
		return []string{"\\p{N}", reGPT2}
	case preGPT2:
		return []string{reGPT2}
	case preQwen2, preGrok2:
		return []string{reQwen2}
	case preQwen35:
		return []string{reQwen35}
	case prePoro:
		return []string{" ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+"}
	case preViking:
		return []string{" ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+", "\\p{N}"}
	case preTekken:
		return []string{"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}
	case preChameleon:
		return []string{
			"<sentinel:[0-9]+>",
			"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
			"([\\t\\n]|    |  )",
			"\\p{N}",
			"[\\p{P}!-/:-@\\[-`{-~]",
			reGPT2,
		}
	case preGPT4o:
		return []string{"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}
	case preGraniteEmbMulti:
		return []string{"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}
	case preSuperBPE:
		return []string{"\\p{N}+", "(?=(\\d{3})+(?!\\d))"}
	case preBailingMoE:
		return []string{"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"}
	case preSeedCoder:
		return []string{"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}
	case preLaguna:
		return []string{reNewlines, reQwen2}
	case preExaoneMoE:
		return []string{"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"}
	case preGemma4, preSarvamMoE:
		return []string{reNewlines}
	case preMiniCPM5:
		return []string{
			"\\p{N}{1,3}",
			"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
		}
	case preWhitespace:
		return []string{"\\S+"}
	}
	// preDefault
	return []string{
		"[\\p{P}\\$\\+<=>\\^~\\|]+",
		reGPT2,
		"\\p{N}+",
		"[0-9][0-9][0-9]",
	}
}
