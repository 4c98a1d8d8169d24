#!/bin/sh
# Compiles every *.comp here to SPIR-V with glslc (`go generate` runs it).
# With an argument, writes the .spv files into that directory instead (the
# regeneration test compares them with the committed ones).
set -e
cd "$(dirname "$0")"
out=${1:-.}
for f in *.comp; do
	env=vulkan1.0
	case $f in
	mm_*) env=vulkan1.1 ;; # subgroup broadcasts (mm_head.glsl)
	esac
	glslc -fshader-stage=compute --target-env=$env -O -o "$out/${f%.comp}.spv" "$f"
done
