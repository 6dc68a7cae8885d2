module idemgate.example/receiver

go 1.19
