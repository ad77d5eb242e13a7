package io.jccl.verbs;

/** InfiniBand MTU values ({@code enum ibv_mtu}); the code is the value ibv_devinfo prints in brackets. */
public enum PathMtu {
    /** 256 bytes. */
    MTU_256(1, 256),
    /** 512 bytes. */
    MTU_512(2, 512),
    /** 1024 bytes. */
    MTU_1024(3, 1024),
    /** 2048 bytes. */
    MTU_2048(4, 2048),
    /** 4096 bytes. */
    MTU_4096(5, 4096);

    private final int code;
    private final int bytes;

    PathMtu(int code, int bytes) {
        this.code = code;
        this.bytes = bytes;
    }

    /** The ibv_mtu code. */
    public int code() {
        return code;
    }

    /** The MTU in bytes. */
    public int bytes() {
        return bytes;
    }
}
