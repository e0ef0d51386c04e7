package record

// Setup builds the hook library and the fake driver once, for the tests
// of package record_test (which may use the layers above).
var Setup = setup
