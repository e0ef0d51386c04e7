//go:build darwin || freebsd

package pytorch

const mapPopulate = 0
