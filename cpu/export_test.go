package cpu

// RepackMinActs is FI_RP_MIN_ACTS, for the tests of package cpu_test.
const RepackMinActs = repackMinActs
