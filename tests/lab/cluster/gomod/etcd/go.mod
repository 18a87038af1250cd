module gpuops.local/cluster/etcd

go 1.26.0
