/**
 * {@code jccl k8s}: writes the Kubernetes manifests of a JCCL job (a Secret with the job's store secret, a headless
 * Service, a NetworkPolicy and an Indexed Job whose pods get their rank from the completion index). The pods then
 * need nothing but {@code Communicator.fromEnvironment()}; docs/kubernetes.md explains every field.
 */
package io.jccl.tools.kubernetes;
