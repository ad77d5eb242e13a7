package io.jccl.verbs.spi;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;

import java.lang.foreign.MemorySegment;

/** A memory region as the software providers keep it: the segment, both keys, access rights and validity. */
public class SoftMemoryRegion implements MemoryRegion {
    private final AbstractProtectionDomain protectionDomain;
    private final MemorySegment segment;
    private final int lkey;
    private final int rkey;
    private final int access;
    private volatile boolean valid = true;
    /** For caller-owned memory: the caller's scope; the region is unusable once it is closed. */
    private MemorySegment.Scope ownerScope;

    /** Creates a region; registration in the key table is the domain's job. */
    public SoftMemoryRegion(AbstractProtectionDomain protectionDomain, MemorySegment segment, int lkey, int rkey,
                            int access) {
        this.protectionDomain = protectionDomain;
        this.segment = segment;
        this.lkey = lkey;
        this.rkey = rkey;
        this.access = access;
    }

    @Override
    public MemorySegment segment() {
        return segment;
    }

    @Override
    public long address() {
        return segment.address();
    }

    @Override
    public long length() {
        return segment.byteSize();
    }

    @Override
    public int lkey() {
        return lkey;
    }

    @Override
    public int rkey() {
        return rkey;
    }

    @Override
    public int access() {
        return access;
    }

    @Override
    public ProtectionDomain protectionDomain() {
        return protectionDomain;
    }

    /** The domain, typed for providers. */
    public AbstractProtectionDomain domain() {
        return protectionDomain;
    }

    @Override
    public boolean isValid() {
        MemorySegment.Scope scope = ownerScope;
        return valid && (scope == null || scope.isAlive());
    }

    /** Ties the region to the scope of caller-owned memory (set once, at registration). */
    void ownerScope(MemorySegment.Scope scope) {
        this.ownerScope = scope;
    }

    /** Whether {@code [address, address + length)} lies inside the region (overflow-safe). */
    public boolean contains(long address, long length) {
        long start = segment.address();
        return length >= 0 && address >= start && address - start <= segment.byteSize() - length;
    }

    /** Whether the region grants {@code flag}. */
    public boolean allows(AccessFlag flag) {
        return flag.isSetIn(access);
    }

    /** Marks the region invalid; called by the domain when deregistering. */
    void invalidate() {
        valid = false;
    }

    /** Releases provider resources after deregistration (allocated memory); default nothing. */
    protected void release() {
    }

    @Override
    public void close() {
        protectionDomain.deregister(this);
    }

    @Override
    public String toString() {
        return "MemoryRegion{addr=0x" + Long.toHexString(address()) + ", len=" + length() + ", lkey=0x"
            + Integer.toHexString(lkey) + ", rkey=0x" + Integer.toHexString(rkey) + ", access="
            + AccessFlag.describe(access) + (valid ? "" : ", deregistered") + "}";
    }
}
