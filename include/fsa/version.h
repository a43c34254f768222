/**
 * @file fsa/version.h
 * The version of the header (written by hand; the build checks it against the
 * VERSION file, docs/versioning.md). Part of fsa.h.
 */
#ifndef FSA_PUBLIC_VERSION_H
#define FSA_PUBLIC_VERSION_H

#define FSA_VERSION_MAJOR 0
#define FSA_VERSION_MINOR 2
#define FSA_VERSION_PATCH 0
#define FSA_VERSION_STRING "0.2.0"

#endif /* FSA_PUBLIC_VERSION_H */
