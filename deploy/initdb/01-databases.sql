-- lockdb for the lock-server replicas, paydb for payment-resource.
CREATE DATABASE lockdb;
CREATE DATABASE paydb;
