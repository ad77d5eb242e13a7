/**
 * {@code jccl devices} and {@code jccl devinfo}: the device list and attributes of every provider, printed with the
 * labels and layout of rdma-core's {@code ibv_devices} and {@code ibv_devinfo}.
 */
package io.jccl.tools.devinfo;
