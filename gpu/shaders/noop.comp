#version 450
// An empty kernel: measures the fixed cost of a dispatch and a fence wait.

layout(local_size_x = 1) in;
layout(std430, binding = 0) buffer B { uint b[]; };

void main() {}
