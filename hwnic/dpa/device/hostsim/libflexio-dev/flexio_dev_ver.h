/*
 * hostsim's flexio_dev_ver.h: how a FlexIO device-API version is
 * written. FLEXIO_DEV_VER(major, minor, sub) packs the release the way
 * the public host header libflexio/flexio_ver.h packs FLEXIO_VER (major
 * from bit 24, minor from bit 16, sub-minor below); only the order of
 * the values matters to the gates in flexio_dev.h and
 * flexio_dev_queue_access.h. FLEXIO_DEV_VER_LATEST asks for the newest
 * API the headers know.
 */
#ifndef SDR_HOSTSIM_FLEXIO_DEV_VER_H
#define SDR_HOSTSIM_FLEXIO_DEV_VER_H

#define FLEXIO_DEV_VER(major, minor, sub) (((major) << 24) | ((minor) << 16) | (sub))
#define FLEXIO_DEV_VER_LATEST FLEXIO_DEV_VER(0xff, 0xff, 0xffff)

#endif
